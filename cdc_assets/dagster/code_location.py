"""Loading the code location: the ``dg`` project's ``defs/`` folder, or a ``cdc_assets.yaml``.

A project configured the earlier way — ``$CDC_ASSETS_CONFIG`` names a ``cdc_assets.yaml``, or
one lies in the working directory — loads that file: each of its sources is a
:class:`~.component.SqlServerCdcSource` built here, its recorded catalog kept in a file per
source under :func:`state_dir` (a file-configured location is no ``dg`` project, so it has no
Dagster defs state). Otherwise the package's ``defs/`` folder is loaded (this repository as a
``dg`` project: the demo source is its component instance).

A problem a person can fix (a bad config file, a source that has never answered) becomes one
:class:`CodeLocationError` whose message is a single line naming the file or the source and
saying what to do; the code location (``cdc_assets.definitions``) and ``cdc-assets check`` show
the same text. Loading never creates a source: a missing emulated source is an error, not a new
empty database.
"""

from __future__ import annotations

import os
from pathlib import Path

from dagster import Definitions
from dagster._core.definitions.definitions_load_context import (
    DefinitionsLoadContext,
    DefinitionsLoadType,
)

from cdc_assets.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_FILE,
    ConfigError,
    ProjectConfig,
    config_path,
    load_config,
)
from cdc_assets.sqlserver.errors import SqlServerError
from cdc_assets.sqlserver.recorded_catalog import RecordedCatalogError

from .component import SqlServerCdcSource, project_resources
from .definitions_builder import build_definitions
from .sync.source import Source

#: Where a file-configured location keeps its sources' recorded catalogs (default: see
#: :func:`state_dir`).
STATE_DIR_ENV = "CDC_ASSETS_STATE_DIR"


class CodeLocationError(Exception):
    """The code location cannot load; the message is one line that says what to do."""


def configured_file() -> Path | None:
    """The ``cdc_assets.yaml`` this location loads instead of the ``defs/`` folder, if any."""
    if os.environ.get(CONFIG_ENV):
        return config_path()
    default = Path(DEFAULT_CONFIG_FILE)
    return default.resolve() if default.is_file() else None


def state_dir(config_file: Path) -> Path:
    """``$CDC_ASSETS_STATE_DIR``, else ``$DAGSTER_HOME/cdc_assets_catalog``, else
    ``.cdc_assets_catalog`` beside the config file."""
    if os.environ.get(STATE_DIR_ENV):
        return Path(os.environ[STATE_DIR_ENV]).expanduser().resolve()
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"]).expanduser().resolve() / "cdc_assets_catalog"
    return config_file.parent / ".cdc_assets_catalog"


def source_components(config: ProjectConfig, config_file: Path) -> list[SqlServerCdcSource]:
    """One component per source of ``config``, each keeping its catalog in its own file."""
    directory = state_dir(config_file)
    return [
        SqlServerCdcSource(
            ProjectConfig(sources=(source,), storage=config.storage, spark=config.spark),
            state_file=directory / f"{source.name}.json",
        )
        for source in config.sources
    ]


def check_definitions(
    path: str | Path | None = None,
) -> tuple[Definitions, list[Source], list[SqlServerCdcSource]]:
    """:func:`load_definitions` as a code server's first load (``cdc-assets check``): every
    source asked and its catalog recorded, whatever load an earlier caller in this process left
    installed (a run's reconstruction, which reads the recorded catalog only)."""
    first = DefinitionsLoadContext(load_type=DefinitionsLoadType.INITIALIZATION)
    with DefinitionsLoadContext.scoped(first):
        return load_definitions(path)


def load_definitions(
    path: str | Path | None = None,
) -> tuple[Definitions, list[Source], list[SqlServerCdcSource]]:
    """The definitions of the config file at ``path`` (default: ``$CDC_ASSETS_CONFIG`` or
    ``./cdc_assets.yaml``), its sources and their components; :class:`CodeLocationError` if
    unusable."""
    failure = ""
    file = config_path(path)
    try:
        config = load_config(path)
    except ConfigError as exc:
        failure = str(exc)
    if failure:  # raised outside the except block: nothing chained, one line shown
        raise CodeLocationError(failure)
    components = source_components(config, file)
    sources: list[Source] = []
    for component in components:
        try:
            sources.append(component.load_source(file.parent))
        except (ConfigError, SqlServerError, RecordedCatalogError) as exc:
            text = str(exc)
            prefix = f"source {component.name!r}: "
            failure = f"{file}: {text if text.startswith(prefix) else prefix + text}"
        if failure:
            raise CodeLocationError(failure)
    try:
        defs = build_definitions(config, sources, resources=project_resources(config))
    except ConfigError as exc:  # a setting that does not fit the sources (examples)
        failure = f"{file}: {exc}"
    if failure:
        raise CodeLocationError(failure)
    return defs, sources, components
