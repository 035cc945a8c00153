"""cdc_assets: SQL Server Change Data Capture as Dagster software-defined assets on Spark.

``cdc_assets.SqlServerCdcSource`` is the project's Dagster Component (``dg`` finds it through the
``dagster_dg_cli.registry_modules`` entry point). It is imported on first use, so that the
Spark workers and the emulator, which import ``cdc_assets.*`` too, do not import Dagster.
"""

from typing import Any

__version__ = "0.1.0"

_COMPONENTS = ("SqlServerCdcSource",)


def __getattr__(name: str) -> Any:
    if name in _COMPONENTS:
        from cdc_assets.dagster import component

        return getattr(component, name)
    raise AttributeError(f"module 'cdc_assets' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_COMPONENTS])
