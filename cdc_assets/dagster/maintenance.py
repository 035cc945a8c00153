"""The maintenance job of a source: storage and run history that stay bounded.

``<source>_maintenance`` runs on its schedule (``maintenance.cron``, hourly by default) and, per
captured table (:mod:`cdc_assets.spark.table_maintenance`):

- sets the change log's, the mirror's and the history's (where the table has one) Delta
  history to ``maintenance.keep_history`` and VACUUMs them: the files of older versions (a
  mirror's or history's MERGEs, their change data feed, replaced change-log partitions, files the
  writers' compactions replaced) are deleted, the log drops older commits at its next checkpoint;
  a table whose last VACUUM left nothing to delete since (quiet for longer than the history) is
  passed over after reading its history;
- with ``maintenance.drop_retired_changes``, deletes the change-log rows of the range partitions
  the sync sensor retired from Dagster (``sync.retain_ranges``; their end is
  :func:`.sync.chain.retired_through`), which no mirror or history needs any more: every one
  applied them;

then deletes the source's finished runs older than ``maintenance.keep_runs`` with their events,
compute logs and (SQLite storage) event files, except what the UI still shows: a sync run is kept
while its partition exists (a range not retired, the snapshot); a health or maintenance run, or a
run of the example assets, while it is among the newest :data:`KEEP_NEWEST` of its kind (they
hold the results shown); and any run that logged the newest ``snapshot`` materialization of an
asset (the mirror's is logged by the first range run after a snapshot).

Small files are not compacted here: each table's writer compacts its own right after its commit
(:mod:`cdc_assets.spark.compaction`), where no range run races it. The commits made here win
over the range runs' (:mod:`cdc_assets.spark.table_maintenance`). A table that fails is reported
in one line (what failed, for which table, what happens next: never a Java stack trace) and the
others go on; the job fails at the end naming them.
"""

# No ``from __future__ import annotations``: Dagster checks the ``context`` annotation at runtime.
import contextlib
import datetime as dt
import os
import time
from collections.abc import Iterator

from dagster import (
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRunStatus,
    Failure,
    JobDefinition,
    OpExecutionContext,
    RunsFilter,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from cdc_assets.config import duration_seconds
from cdc_assets.spark.compaction import first_line
from cdc_assets.spark.table_maintenance import keep_bounded

from .examples import EXAMPLES_SENSOR
from .housekeeping import housekeeping_tags, one_at_a_time_schedule
from .sync.chain import retired_through
from .sync.names import (
    PARTITION_RUN_TAG,
    PARTITION_TAG,
    SNAPSHOT_PARTITION,
    health_job_name,
    maintenance_job_name,
    partitions_name,
    sync_job_name,
)
from .sync.partitions import parse_partition
from .sync.source import Source
from .sync.sync_state import state_path

SENSOR_NAME_TAG = "dagster/sensor_name"  # on runs a sensor started
KEEP_NEWEST = 20  # runs of each job never deleted, whatever their age
DELETE_PAGE = 500  # runs looked at per query
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


def _retired_keys(keys: list[str], through: object) -> list[str]:
    """The range keys among ``keys`` that end at or before ``through`` (retired)."""
    found = []
    for key in keys:
        if key == SNAPSHOT_PARTITION:
            continue
        lsn_range = parse_partition(key)
        if lsn_range is not None and through is not None and lsn_range.hi <= through:
            found.append(key)
    return found


def _shown_snapshot_runs(instance: DagsterInstance, source: Source) -> set[str]:
    """The runs that logged the newest 'snapshot' materialization of each asset of the source."""
    runs = set()
    for table in source.tables:
        histories = [table.history_key] if source.has_history(table) else []
        for key in (table.change_log_key, table.mirror_key, *histories):
            found = instance.fetch_materializations(
                AssetRecordsFilter(asset_key=key, asset_partitions=[SNAPSHOT_PARTITION]), limit=1
            )
            runs.update(r.run_id for r in found.records)
    return runs


def _deletable_runs(
    instance: DagsterInstance, source: Source, keep_seconds: float, current_run: str
) -> Iterator[str]:
    """Run ids of the source's finished runs that may go (see the module doc), oldest first."""
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=keep_seconds)
    through = retired_through(instance, partitions_name(source.name))
    shown = _shown_snapshot_runs(instance, source)
    sync = RunsFilter(job_name=sync_job_name(source.name))
    kinds = (
        sync,
        RunsFilter(job_name=health_job_name(source.name)),
        RunsFilter(job_name=maintenance_job_name(source.name)),
        # the example assets' runs, started by their automation sensor
        RunsFilter(tags={SENSOR_NAME_TAG: EXAMPLES_SENSOR}),
    )
    for kind in kinds:
        newest: set[str] = set()
        if kind is not sync:  # unpartitioned: their newest runs hold the results shown
            newest = {r.run_id for r in instance.get_runs(kind, limit=KEEP_NEWEST)}
        old = instance.get_runs(
            RunsFilter(
                job_name=kind.job_name, tags=kind.tags, statuses=FINISHED, created_before=cutoff
            ),
            limit=DELETE_PAGE,
            ascending=True,
        )
        for run in old:
            if run.run_id in newest or run.run_id in shown or run.run_id == current_run:
                continue
            partition = run.tags.get(PARTITION_TAG) or run.tags.get(PARTITION_RUN_TAG)
            if partition is not None and not _retired_keys([partition], through):
                continue  # its partition still exists: the UI shows this run's result
            yield run.run_id


def delete_runs(
    instance: DagsterInstance, source: Source, keep_seconds: float, current_run: str = ""
) -> int:
    """Delete the runs :func:`_deletable_runs` names, with their events and compute logs."""
    deleted = 0
    events = instance.event_log_storage
    for run_id in list(_deletable_runs(instance, source, keep_seconds, current_run)):
        instance.delete_run(run_id)
        if isinstance(events, SqliteEventLogStorage):
            # the run's own SQLite file (dagster dev's default storage) stays, emptied, else
            shard = events.path_for_shard(run_id)
            for path in (shard, f"{shard}-wal", f"{shard}-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        # a log manager that cannot delete by prefix keeps the logs (they are small)
        with contextlib.suppress(NotImplementedError, OSError):
            instance.compute_log_manager.delete_logs(prefix=[run_id])
        deleted += 1
    return deleted


def build_maintenance_job(source: Source) -> JobDefinition:
    policy = source.config.maintenance
    history = duration_seconds(policy.keep_history)

    @op(
        name=f"{source.name}_maintain_storage",
        required_resource_keys={"pyspark"},
        description=f"VACUUM and history retention for every change log, mirror and history of "
        f"source '{source.name}' (their writers compact their small files); retired ranges' rows "
        "dropped when configured; old runs deleted.",
    )
    def maintain(context: OpExecutionContext) -> None:
        spark = context.resources.pyspark.spark_session
        store = source.store
        through = retired_through(context.instance, partitions_name(source.name))
        failed: list[str] = []
        for n, table in enumerate(source.tables, 1):
            started = time.monotonic()
            try:
                histories = [table.history_key] if source.has_history(table) else []
                for key in (table.change_log_key, table.mirror_key, *histories):
                    if store.commit_properties(key.path) is None:
                        continue  # nothing written yet
                    drop: list[str] = []
                    if policy.drop_retired_changes and key == table.change_log_key:
                        drop = _retired_keys(store.partition_keys(key.path), through)
                    done = keep_bounded(spark, store.location(key.path), history, drop)
                    if done.skipped:
                        context.log.info(
                            f"[{n}/{len(source.tables)}] {key.to_user_string()}: nothing to do "
                            f"(no file left to delete, version {done.version_after})"
                        )
                        continue
                    context.log.info(
                        f"[{n}/{len(source.tables)}] {key.to_user_string()}: kept "
                        f"{policy.keep_history} of history"
                        + (f", dropped {done.partitions_dropped} retired ranges" if drop else "")
                        + (
                            f", deleted {done.files_deleted} files"
                            if done.files_deleted is not None
                            else ""
                        )
                        + f", version {done.version_before} -> {done.version_after}"
                    )
            except Exception as exc:  # one table's failure never holds back the others
                failed.append(table.qualified_name)
                context.log.error(
                    f"{table.qualified_name}: maintenance failed ({first_line(exc)}); the other "
                    "tables go on, the next maintenance run tries this one again"
                )
            context.log.debug(f"{table.qualified_name}: {time.monotonic() - started:.1f} s")
        state = state_path(source)
        if store.commit_properties(state) is not None:
            try:  # the source's sync state: rewritten a few times per range
                keep_bounded(spark, store.location(state), history)
            except Exception as exc:
                failed.append("the sync state")
                context.log.error(
                    f"the sync state of {source.name}: maintenance failed ({first_line(exc)}); "
                    "the next maintenance run tries it again"
                )
        if policy.keep_runs is not None:
            deleted = delete_runs(
                context.instance, source, duration_seconds(policy.keep_runs), context.run_id
            )
            context.log.info(f"deleted {deleted} runs older than {policy.keep_runs}")
        if failed:
            raise Failure(
                f"maintenance failed for {', '.join(failed)} (the other tables were maintained); "
                "see the errors above, then run the job again"
            )

    @job(
        name=maintenance_job_name(source.name),
        executor_def=in_process_executor,
        tags=housekeeping_tags(source.name),
        description=f"Keeps the storage and run history of source '{source.name}' bounded "
        f"(maintenance: {policy.cron}, history {policy.keep_history}, runs "
        f"{policy.keep_runs or 'kept'}).",
    )
    def maintenance() -> None:
        maintain()

    return maintenance


def build_maintenance_schedule(source: Source, maintenance: JobDefinition) -> ScheduleDefinition:
    return one_at_a_time_schedule(
        f"{maintenance_job_name(source.name)}_schedule",
        maintenance,
        source.config.maintenance.cron,
        f"maintenance.cron of source '{source.name}': {source.config.maintenance.cron}.",
    )
