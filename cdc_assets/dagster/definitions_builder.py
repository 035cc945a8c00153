"""Definitions from the project config: per source the external source-table specs, the
change-log and mirror multi-assets on one dynamic partitions definition, the sync job and its
sensor; shared resources (Spark through dagster-pyspark, the Parquet IO manager)."""

from __future__ import annotations

from dagster import (
    AssetSelection,
    AssetSpec,
    Definitions,
    define_asset_job,
    in_process_executor,
)
from dagster_pyspark import LazyPySparkResource

from cdc_assets.config import ProjectConfig
from cdc_assets.spark.session import remote_url, session_options, use_this_python_for_workers

from .change_log import build_change_logs
from .examples import build_examples
from .health_checks import build_capture_checks
from .io_manager import SparkParquetIOManager
from .metadata import asset_tags, table_metadata
from .mirror import build_mirrors
from .mirror_checks import build_mirror_checks
from .names import IO_MANAGER, SOURCE_TAG, group_name, sync_job_name
from .partitions import source_partitions
from .source import Source, load_source
from .sync_sensor import build_sync_sensor


def spark_resource(config: ProjectConfig) -> LazyPySparkResource:
    """Spark via dagster-pyspark: created on first use, with the project's session settings; a
    Spark Connect session when ``spark.remote`` is set (the run attaches to a warm server)."""
    use_this_python_for_workers()
    return LazyPySparkResource(
        spark_config=session_options(
            master=config.spark.master,
            remote=remote_url(config.spark.remote),
            conf=config.spark.conf,
            storage_path=str(config.storage.base_path),
        )
    )


def source_definitions(source: Source) -> Definitions:
    partitions = source_partitions(source.name)
    specs = [
        AssetSpec(
            t.source_key,
            description=f"SQL Server table {t.qualified_name} (source '{source.name}'), captured "
            f"by CDC instance {t.instance.name}. External: shown for lineage.",
            group_name=group_name(source.name),
            kinds={"sqlserver"},
            metadata=table_metadata(t.instance, t.qualified_name),
            owners=list(source.config.owners),
            tags=asset_tags(source.config, t.schema),
        )
        for t in source.tables
    ]
    change_logs = build_change_logs(source, partitions)
    mirrors = build_mirrors(source, partitions)
    mirror_checks = build_mirror_checks(source, partitions)
    capture_checks = build_capture_checks(source)
    job = define_asset_job(
        sync_job_name(source.name),
        # The change logs' blocking checks run in the job; mirror and capture checks on demand.
        selection=AssetSelection.assets(change_logs, mirrors)
        - AssetSelection.checks(mirror_checks, capture_checks),
        tags={SOURCE_TAG: source.name},
        # Both steps in one process: one Spark session per run instead of one per step (a
        # Spark start costs 10-20 s, more than a typical range takes to sync).
        executor_def=in_process_executor,
        description=f"One LSN range (or the snapshot) of every table of source '{source.name}': "
        "change logs, their coverage checks, then the mirrors.",
    )
    return Definitions(
        assets=[*specs, change_logs, mirrors],
        asset_checks=[mirror_checks, capture_checks],
        jobs=[job],
        sensors=[build_sync_sensor(source, partitions, job)],
    )


def build_definitions(config: ProjectConfig, sources: list[Source] | None = None) -> Definitions:
    """All sources of ``config`` (discovered now unless ``sources`` is given)."""
    if sources is None:
        sources = [load_source(s, config.storage.base_path) for s in config.sources]
    pyspark = spark_resource(config)
    resources = {
        "pyspark": pyspark,
        IO_MANAGER: SparkParquetIOManager(base_path=str(config.storage.base_path), pyspark=pyspark),
    }
    return Definitions.merge(
        *(source_definitions(s) for s in sources),
        Definitions(assets=build_examples(config.examples, sources), resources=resources),
    )
