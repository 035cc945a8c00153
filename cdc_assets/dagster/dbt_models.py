"""The dbt example (``examples: [dbt]``): a dbt project's models on the mirrors, loaded with
dagster-dbt, so the lineage runs SQL Server table -> change log -> mirror -> dbt models.

The project (``cdc_assets/dbt_example``) reads the mirrors by name (each registered in the
Spark catalog, :mod:`.sync.table_names`), and its translator maps each dbt source onto the
mirror's asset key (``cdc.dbo_orders_mirror`` -> ``mirror/<source>/dbo/orders_mirror``). The
models run on dbt-spark's ``session`` method, a PySpark session that is a Spark Connect client
of ``spark.remote``: the same Spark the sync runs attach to, whose session catalog holds the
names (so the example needs ``spark.remote``). They follow their mirrors as ``daily_orders``
does, after a mirror moved, but every five minutes (a build costs a core for most of a minute),
by their automation condition, evaluated by the examples' sensor; never inside a sync run. Each
run records the models' columns and their column lineage (dagster-dbt's
``fetch_column_metadata``), down to the mirrors' columns.

The manifest is prepared without network (``dbt parse``: the project has no packages) when it
is missing or older than a file of the project: at install time (``scripts/setup.sh``), else at
the first load after a change.
"""

import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dagster import AssetExecutionContext, AssetKey, AssetsDefinition, AutomationCondition
from dagster_dbt import DagsterDbtTranslator, DbtCliResource, DbtProject, dbt_assets

from cdc_assets.spark.session import REMOTE_ENV

from .sync.names import key_part
from .sync.source import Source
from .sync.table_names import database_of, table_name

PROJECT_DIR = Path(__file__).resolve().parents[1] / "dbt_example"
RESOURCE = "dbt"
SCHEMA_ENV = "CDC_ASSETS_DBT_SCHEMA"  # the database the models are written to (profiles.yml)
TABLES = (("dbo", "orders"), ("dbo", "order lines"), ("dbo", "customers"))


def dbt_project() -> DbtProject:
    """The example project, its manifest prepared (:func:`prepare`)."""
    project = DbtProject(project_dir=PROJECT_DIR, profiles_dir=PROJECT_DIR)
    prepare(project)
    return project


def prepare(project: DbtProject) -> bool:
    """``dbt parse`` (offline) when the manifest is missing or older than a project file;
    True when it ran."""
    manifest = project.manifest_path
    files = [p for p in Path(project.project_dir).rglob("*") if p.suffix in (".sql", ".yml")]
    files = [p for p in files if Path(project.target_path) not in p.parents]
    if manifest.exists() and all(p.stat().st_mtime <= manifest.stat().st_mtime for p in files):
        return False
    cli = DbtCliResource(project_dir=project, dbt_executable=dbt_executable())
    cli.cli(["parse", "--quiet"], target_path=project.target_path).wait()
    return True


def dbt_executable() -> str:
    """This environment's ``dbt`` (its ``bin`` need not be on ``PATH``)."""
    beside = Path(sys.executable).with_name("dbt")
    return str(beside) if beside.exists() else "dbt"


def model_key(source: str, model: str) -> AssetKey:
    return AssetKey(["dbt", source, key_part(model)])


class MirrorsTranslator(DagsterDbtTranslator):
    """dbt sources are the source's mirrors (by their registered names); models are
    ``dbt/<source>/<model>`` in group ``analytics``, following their mirrors every five minutes."""

    def __init__(self, source: Source, cron: str) -> None:
        super().__init__()
        self._source = source
        self._cron = cron
        self._mirrors = {
            name.table: t.mirror_key
            for t in source.tables
            if (name := table_name(source.config, t.mirror_key)) is not None
        }

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        name = dbt_resource_props["name"]
        if dbt_resource_props["resource_type"] == "source":
            return self._mirrors.get(name.lower()) or super().get_asset_key(dbt_resource_props)
        return model_key(self._source.name, name)

    def get_group_name(self, dbt_resource_props: Mapping[str, Any]) -> str | None:
        return "analytics"

    def get_owners(self, dbt_resource_props: Mapping[str, Any]) -> list[str] | None:
        return list(self._source.config.owners) or None

    def get_automation_condition(
        self, dbt_resource_props: Mapping[str, Any]
    ) -> AutomationCondition | None:
        return AutomationCondition.on_cron(self._cron)


def build_dbt_models(source: Source, spark_remote: str, cron: str) -> AssetsDefinition:
    """The example project's models on ``source``'s mirrors, run on ``spark_remote``."""
    project = dbt_project()
    variables = json.dumps({"cdc_database": database_of(source.config)})

    @dbt_assets(
        manifest=project.manifest_path,
        project=project,
        name=f"{source.name}_dbt_models",
        dagster_dbt_translator=MirrorsTranslator(source, cron),
    )
    def dbt_models(context: AssetExecutionContext, dbt: DbtCliResource) -> Iterator[Any]:
        # profiles.yml reads the Spark Connect server from here (the configured one, unless
        # the environment names another, as make demo's DEMO_SPARK_PORT does)
        os.environ.setdefault(REMOTE_ENV, spark_remote)
        invocation = dbt.cli(["build", "--vars", variables], context=context)
        yield from invocation.stream().fetch_column_metadata()

    return dbt_models


def dbt_resource() -> DbtCliResource:
    return DbtCliResource(project_dir=dbt_project(), dbt_executable=dbt_executable())


def has_tables(source: Source) -> bool:
    found = {(t.schema.lower(), t.name.lower()) for t in source.tables}
    return all(t in found for t in TABLES)


if __name__ == "__main__":  # scripts/setup.sh: the manifest prepared at install time
    done = prepare(DbtProject(project_dir=PROJECT_DIR, profiles_dir=PROJECT_DIR))
    print(f"dbt example: manifest {'prepared' if done else 'up to date'} in {PROJECT_DIR}")
