"""Definitions from the project config: per source the external source-table specs, the
change-log and mirror multi-assets on one dynamic partitions definition, the sync job and its
sensor; shared resources (Spark through dagster-pyspark, the Delta IO manager)."""

from __future__ import annotations

from typing import Any

from dagster import (
    AssetCheckKey,
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
from .examples import build_examples, examples_sensor
from .health_checks import build_capture_checks
from .history import build_histories
from .history_checks import INTERVAL_INTEGRITY, build_history_checks
from .housekeeping import housekeeping_tags, one_at_a_time_schedule
from .maintenance import build_maintenance_job, build_maintenance_schedule
from .mirror import build_mirrors
from .mirror_checks import RECONCILE, build_mirror_checks
from .sync.chain_end_check import AT_CHAIN_END
from .sync.io_manager import SparkDeltaIOManager
from .sync.metadata import asset_tags, table_metadata
from .sync.names import IO_MANAGER, SOURCE_TAG, group_name, health_job_name, sync_job_name
from .sync.partitions import source_partitions
from .sync.source import Source, load_source
from .sync_sensor import build_sync_sensor

HEALTH_CRON = "*/5 * * * *"


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
    histories = build_histories(source, partitions)  # where the source's `history` names tables
    mirror_checks = build_mirror_checks(source)
    history_checks = build_history_checks(source, partitions)
    capture_checks = build_capture_checks(source)
    health_only = AssetSelection.checks(
        *(AssetCheckKey(t.mirror_key, RECONCILE) for t in source.tables),
        *(
            AssetCheckKey(t.history_key, name)
            for t in source.history_tables
            for name in (RECONCILE, INTERVAL_INTEGRITY)
        ),
    )
    at_chain_end = AssetSelection.checks(
        *(AssetCheckKey(t.mirror_key, AT_CHAIN_END) for t in source.tables)
    )
    job = define_asset_job(
        sync_job_name(source.name),
        # Every run evaluates the change logs' checks, the mirrors step reports at_chain_end for
        # its mirrors itself (:mod:`.sync.chain_end_check`), capture_health follows (a few catalog
        # queries), so every check the UI shows has a current result; reconcile (an exact
        # snapshot of the source to count its rows) and the histories' interval_integrity (a
        # read of each history) run with capture_health on the schedule below. The
        # at_chain_end check step stays in the job for "Execute checks".
        selection=AssetSelection.assets(*change_logs, *mirrors, *histories) - health_only,
        tags={SOURCE_TAG: source.name},
        # Both steps in one process: one Spark session per run instead of one per step (a
        # Spark start costs 10-20 s, more than a typical range takes to sync).
        executor_def=in_process_executor,
        description=f"One LSN range (or the snapshot) of every table of source '{source.name}': "
        "change logs, their coverage checks, then the mirrors, then the histories.",
    )
    health_job = define_asset_job(
        health_job_name(source.name),
        # at_chain_end too: a stalled sync (a run that cannot start, a failed run not retried)
        # has no range run left to report it
        selection=health_only | at_chain_end | AssetSelection.checks(capture_checks),
        executor_def=in_process_executor,  # one process (and at most one Spark) per run
        tags=housekeeping_tags(source.name),
        description=f"Health of source '{source.name}' while nothing else runs: the mirrors' and "
        "histories' row counts against the source (reconcile), the histories' intervals "
        "(interval_integrity), whether the sync is stuck (at_chain_end, which no range run "
        "reports once runs stop) and the CDC capture job (capture_health, which no sync run "
        "would check once capture has stopped and the max LSN stands still).",
    )
    health_schedule = one_at_a_time_schedule(
        f"{health_job_name(source.name)}_schedule",
        health_job,
        HEALTH_CRON,
        "Every 5 minutes: reconcile, interval_integrity and capture_health.",
    )
    maintenance = build_maintenance_job(source)
    return Definitions(
        assets=[*specs, *change_logs, *mirrors, *histories],
        asset_checks=[mirror_checks, *history_checks, capture_checks],
        jobs=[job, health_job, maintenance],
        sensors=[build_sync_sensor(source, partitions, job)],
        schedules=[health_schedule, build_maintenance_schedule(source, maintenance)],
    )


def shared_resources(config: ProjectConfig) -> dict[str, Any]:
    """The resources every asset of ``config`` uses: Spark and the Delta IO manager."""
    pyspark = spark_resource(config)
    return {
        "pyspark": pyspark,
        IO_MANAGER: SparkDeltaIOManager(base_path=str(config.storage.base_path), pyspark=pyspark),
    }


def build_definitions(
    config: ProjectConfig,
    sources: list[Source] | None = None,
    *,
    resources: dict[str, Any] | None = None,
) -> Definitions:
    """All sources of ``config`` (discovered now unless ``sources`` is given); ``resources``:
    those of :func:`shared_resources`, when several definitions must share the same objects."""
    if sources is None:
        sources = [load_source(s, config.storage.base_path) for s in config.sources]
    if resources is None:
        resources = shared_resources(config)
    examples = build_examples(config.examples, sources, remote_url(config.spark.remote))
    if "dbt" in config.examples:
        from .dbt_models import RESOURCE, dbt_resource

        resources = {RESOURCE: dbt_resource(), **resources}
    return Definitions.merge(
        *(source_definitions(s) for s in sources),
        Definitions(
            assets=examples,
            sensors=[examples_sensor(examples)] if examples else [],
            resources=resources,
        ),
    )
