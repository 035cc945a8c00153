"""``cdc/<source>/<schema>/<table>``: each table's change log as partitions of one source-wide
dynamic partitions definition — ``snapshot`` (the rows at the snapshot LSN) and ``<lo>-<hi>`` (the
change rows with ``lo < __$start_lsn <= hi``).

One multi-asset per group of a source's tables (:mod:`.sync.table_steps`); a range run selects the
tables that changed in the range (the sync sensor counts them) and records the range for the
source's other tables, quiet, in its sync state (:mod:`.sync.quiet_ranges`; the run's first
change-log step does it). The reads are Spark jobs whose tasks open their own connections
on the executors (:mod:`cdc_assets.spark.sqlserver_source`), several tables at a time
(:mod:`.sync.table_pool`). Each output is published with properties computed
from the written data, and two checks per table follow it:

- ``coverage``: after the write, the capture instance's min LSN is still at or below ``lo + 1``
  and ``hi`` is at or below the max LSN — cleanup did not remove changes under the read;
- ``chain``: ``lo`` is the previous range's ``hi``, or at or below the table's snapshot LSN.

One table never holds back the others: each table's partition is committed in the asset body, so
a table whose read or write fails (a capture instance gone, a type it cannot convert, a keyless
table without snapshot isolation) writes nothing, gets a failed ``coverage`` check saying why, and
its mirror stays where it was, while the other tables commit the range. A failed check does not
block the mirrors step (which refuses such a table's range itself and fails the run at the end
naming it); a snapshot run fails at the end naming its failed tables. Only an error of the whole
source (unreachable, login refused) fails the run at once.

This module holds the asset factory; what a partition writes is in :mod:`.sync.change_log_outputs`,
the checks in :mod:`.change_log_checks`, snapshot and gap marks in :mod:`.sync.change_log_state`.
"""

import threading
from collections.abc import Iterator
from dataclasses import replace

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetMaterialization,
    AssetObservation,
    AssetOut,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    MetadataValue,
    Output,
    multi_asset,
)
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark.session import use_in_this_thread
from cdc_assets.sqlserver import SourceTable, discover
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.changed_tables import changed_instances, established_instances
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.errors import SqlServerError
from cdc_assets.sqlserver.range_facts import RangeTimes

from .change_log_checks import (
    chain_result,
    change_log_check_specs,
    coverage_result,
    quiet_coverage_result,
    schema_change_result,
    snapshot_chain_result,
    unavailable_result,
)
from .sync.chain import SnapshotInfo, effective_range, recent_ranges, retired_through
from .sync.chain_end_check import ChainEndView, as_evaluation
from .sync.change_log_outputs import (
    instance_for,
    quiet_range_metadata,
    range_output,
    snapshot_output,
)
from .sync.change_log_state import clear_gap, mark_gap, snapshot_info
from .sync.column_rule_changes import rules_change_result
from .sync.history_check_results import history_at_chain_end
from .sync.io_manager import Written, is_source_level, table_error, write_output
from .sync.metadata import asset_tags, table_metadata
from .sync.names import COVERAGE, IO_MANAGER, RESNAPSHOT_TAG, SNAPSHOT_PARTITION, group_name
from .sync.partitions import parse_partition
from .sync.quiet_ranges import quiet_tables, record_quiet
from .sync.range_order import wait_for_earlier_ranges
from .sync.snapshot_resume import Progress
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync
from .sync.table_failures import cleared, record_failures
from .sync.table_names import drop_gone_tables, register_table
from .sync.table_pool import LogLine, ThreadConnections, collect, run_tables
from .sync.table_steps import records_quiet_tables, step_name, table_groups

KINDS = {"sqlserver", "spark", "delta"}


def build_change_logs(
    source: Source, partitions: DynamicPartitionsDefinition
) -> list[AssetsDefinition]:
    """The change-log multi-assets of ``source``: one output per captured table, one step per
    group of tables (:mod:`.sync.table_steps`)."""
    groups = table_groups(source.tables)
    return [_change_log_step(source, partitions, groups, i) for i in range(len(groups))]


def _change_log_step(
    source: Source,
    partitions: DynamicPartitionsDefinition,
    groups: list[list[CapturedTable]],
    index: int,
) -> AssetsDefinition:
    """The change-log multi-asset of group ``index`` of ``source``'s tables."""
    tables = groups[index]
    by_key = {t.change_log_key: t for t in tables}
    outs = {
        t.change_log_key.to_python_identifier(): AssetOut(
            key=t.change_log_key,
            is_required=False,
            io_manager_key=IO_MANAGER,
            group_name=group_name(source.name),
            kinds=KINDS,
            description=f"Change log of {t.qualified_name} in source '{source.name}': partition "
            "'snapshot' holds the rows at the snapshot LSN, each `<lo>-<hi>` partition the "
            "change rows with `lo < __$start_lsn <= hi`.",
            metadata=table_metadata(t.instance, t.qualified_name),
            owners=list(source.config.owners),
            tags=asset_tags(source.config, t.schema),
        )
        for t in tables
    }

    @multi_asset(
        name=step_name(f"{source.name}_change_logs", index, len(groups)),
        outs=outs,
        check_specs=change_log_check_specs(tables),
        can_subset=True,
        partitions_def=partitions,
        deps=[t.source_key for t in tables],
        internal_asset_deps={
            t.change_log_key.to_python_identifier(): {t.source_key} for t in tables
        },
        required_resource_keys={"pyspark"},
    )
    def change_logs(
        context: AssetExecutionContext,
    ) -> Iterator[Output | AssetCheckResult | AssetMaterialization]:
        try:
            yield from events(context)
        except SqlServerError as exc:
            # unreachable, login refused, connection lost...: the message and what to do, once
            raise Failure(
                description=f"source {source.name}: {exc}",
                metadata={"source_error": type(exc).__name__},
                allow_retries=True,
            ) from None

    def events(
        context: AssetExecutionContext,
    ) -> Iterator[Output | AssetCheckResult | AssetMaterialization]:
        lsn_range = parse_partition(context.partition_key)
        if lsn_range is not None:  # the runs of earlier ranges first (:mod:`.sync.range_order`)
            wait_for_earlier_ranges(context.instance, source.name, context.run, context.log.info)
        spark = context.resources.pyspark.spark_session
        selected = [by_key[k] for k in context.selected_asset_keys if k in by_key]
        # the keys back to this range's start (its predecessor), not all of them
        ranges = (
            recent_ranges(context.instance, partitions.name, reach=lsn_range.lo)
            if lsn_range is not None
            else []
        )
        retired = retired_through(context.instance, partitions.name)
        wanted = context.selected_asset_check_keys

        def table_events(table: CapturedTable) -> Iterator[Event]:
            """One table's partition, committed here: its failure is its own (the caller). Runs
            in a worker thread (:mod:`.sync.table_pool`): its events are yielded by the step."""
            if (misfit := misfits.get((table.schema, table.name))) is not None:
                raise Failure(f"{table.qualified_name}: {misfit}")
            conn = conns.get()
            found = catalog.get((table.schema, table.name))
            snapshot: SnapshotInfo | None = None
            if lsn_range is None:
                reason = context.run.tags.get(RESNAPSHOT_TAG)
                instance = instance_for(found, table, None)
                live = _LiveReports(context, table)
                output = snapshot_output(
                    spark, source, table, instance, reason, conn, log=live.log, report=live.report
                )
            else:
                snapshot = snapshot_info(source, table)
                read_range = effective_range(lsn_range, snapshot)
                instance = instance_for(found, table, (read_range or lsn_range).first)
                refused = schema_change_result(found, table, snapshot, lsn_range)
                refused = refused or rules_change_result(table, instance, snapshot)
                # a re-snapshot resolves these as a matter of course: the mirror and history
                # wait for it without failing the run (a gap of cleanup may need a person)
                expected = refused is not None and source.config.sync.on_gap == "resnapshot"
                if refused is None and read_range is not None:
                    refused = unavailable_result(conn, table, instance, read_range)
                if refused is not None:
                    # Nothing is written: the check fails, the mirror stays where it was, and
                    # the gap tells the sensor to re-snapshot the table (sync.on_gap).
                    yield LogLine("error", refused.description or "range not available")
                    mark_gap(
                        spark,
                        source,
                        table,
                        context.partition_key,
                        reason=refused.description,
                        snapshot=snapshot,
                        run_id=context.run.run_id,
                        awaits_resnapshot=expected,
                    )
                    chained = chain_result(table, lsn_range, ranges, snapshot, retired)
                    yield _not_written(table, refused.description or "range not available")
                    yield from (r for r in (refused, chained) if _key(r) in wanted)
                    return
                clear_gap(spark, source, table, context.partition_key)
                assert times is not None  # made with lsn_range
                output = range_output(
                    source,
                    table,
                    conn,
                    lsn_range,
                    instance,
                    read_range,
                    times,
                    change_rows=changed.get(instance.name),
                )
            source_event = _source_table_event(table, context.partition_key, changed, instance)
            if source_event is not None:
                yield source_event
            path = table.change_log_key.path
            published = write_output(spark, source.store, path, context.partition_key, output.write)
            if lsn_range is None:  # created, or its columns may have changed: by name
                yield from register_table(spark, source, table.change_log_key, change_log=True)
            yield Output(
                Written(published, output.metadata),
                output_name=table.change_log_key.to_python_identifier(),
            )
            results = [coverage_result(table, published.properties)]
            if lsn_range is None:
                results.append(snapshot_chain_result(table))
            else:
                # the snapshot read above: a range run does not write the snapshot
                results.append(chain_result(table, lsn_range, ranges, snapshot, retired))
            yield from (r for r in results if _key(r) in wanted)

        times = RangeTimes(lsn_range) if lsn_range is not None else None
        conn = source.connect()
        conns = ThreadConnections(source)
        try:
            catalog = discover(conn)  # once per run: capture instances of every table
            if source.recorder is not None and (
                note := source.recorder.record(catalog, context.instance)
            ):
                context.log.info(note)  # the catalog the definitions load from, kept current
            # read as the rules say; a table a rule no longer fits fails alone, saying why
            catalog, misfits = source.config.columns.apply_all(catalog)
            # One statement (per 200 instances) says which tables have changes in the range;
            # the quiet ones record it without reading the source or counting rows in Spark.
            changed = (
                changed_instances(
                    conn,
                    _instance_names(catalog, selected),
                    lsn_range,
                    among=established_instances(catalog),
                )
                if lsn_range is not None
                else {}
            )
            failed: dict[str, str] = {}
            failed_tables: dict[CapturedTable, str] = {}
            written: list[CapturedTable] = []
            workers = source.config.sync.tables_in_parallel
            for done in run_tables(
                selected,
                lambda t: collect(table_events(t)),
                workers,
                lambda: use_in_this_thread(spark),
            ):
                table = done.table
                events, error = done.result or ([], done.error)
                wrote = False
                for event in events:
                    if isinstance(event, LogLine):
                        getattr(context.log, event.level)(event.text)
                        continue
                    if isinstance(event, Output):
                        wrote = True
                        if event.value is not None:
                            written.append(table)
                    yield event
                if error is None:
                    continue
                if is_source_level(error):
                    raise error  # the whole source: the run fails and is retried whole
                # One table never holds back the others: this one writes nothing, its check
                # says why, and the mirrors step leaves its mirror where it was.
                message = table_error(table.qualified_name, error)
                context.log.error(message)
                failed[table.qualified_name] = message
                failed_tables[table] = message
                result = AssetCheckResult(
                    asset_key=table.change_log_key,
                    check_name=COVERAGE,
                    passed=False,
                    severity=AssetCheckSeverity.ERROR,
                    description=message[:2000],
                )
                if lsn_range is not None and not wrote:
                    yield _not_written(table, message)
                if _key(result) in wanted:
                    yield result
            if lsn_range is None:
                _record_snapshots(context, spark, source, written, failed_tables)
                drop_gone_tables(spark, source, context.log.info)
            else:
                # the assets of the whole run (its job's subset), not only this step's
                run_keys = context.job_def.asset_layer.selected_asset_keys
                if records_quiet_tables(groups, index, run_keys):
                    others = [t for t in source.tables if t.change_log_key not in run_keys]
                    assert times is not None
                    yield from _record_quiet_tables(
                        context, spark, source, conn, catalog, others, (ranges, retired), times
                    )
            if failed and lsn_range is None:
                # a snapshot run has no mirrors step to name them: it fails here
                raise Failure(description=_not_snapshotted(list(failed.values()), len(selected)))
        finally:
            conns.close()
            conn.close()

    return change_logs


Event = Output | AssetCheckResult | AssetMaterialization | LogLine


def _not_snapshotted(failures: list[str], selected: int) -> str:
    """A snapshot run's failure: its tables' messages, after how many of how many failed."""
    if len(failures) == selected:
        head = "not snapshotted" if selected == 1 else f"none of the {selected} tables snapshotted"
    else:
        head = f"{len(failures)} of {selected} tables not snapshotted (the others were)"
    return f"{head}: " + " | ".join(failures)


_LIVE_LOCK = threading.Lock()  # one table's worker thread at a time writes to the step's log


class _LiveReports:
    """A long snapshot's lines and progress, logged as they happen from the table's worker
    thread (its other events wait for the table to finish): a log line per committed batch of
    chunks and an observation of the change log's ``snapshot`` partition with the numbers."""

    def __init__(self, context: AssetExecutionContext, table: CapturedTable) -> None:
        self._context = context
        self._table = table

    def log(self, text: str) -> None:
        with _LIVE_LOCK:
            self._context.log.info(text)

    def report(self, progress: Progress) -> None:
        line = progress.line()
        with _LIVE_LOCK:
            self._context.log.info(line)
            self._context.log_event(
                AssetObservation(
                    asset_key=self._table.change_log_key,
                    partition=SNAPSHOT_PARTITION,
                    description=line,
                    metadata=progress.metadata(),
                )
            )


def _record_snapshots(
    context: AssetExecutionContext,
    spark: SparkSession,
    source: Source,
    tables: list[CapturedTable],
    failures: dict[CapturedTable, str],
) -> None:
    """The new snapshots into the sync state (as their partitions were published), and the
    tables whose snapshot failed, each retried on its own schedule (:mod:`.sync.table_failures`)."""
    if not tables and not failures:
        return
    sync = SourceSync.load(source, fill=False)  # a new snapshot: the mirror is rebuilt anyway
    updates = {}
    for table in tables:
        snapshot = snapshot_info(source, table)
        if snapshot is not None:
            updates[table] = cleared(replace(sync[table], snapshot=snapshot))
    record_failures(context.instance, context.run.run_id, spark, sync, failures, updates)


def _record_quiet_tables(
    context: AssetExecutionContext,
    spark: SparkSession,
    source: Source,
    conn: DbapiConnection,
    catalog: dict[tuple[str, str], SourceTable],
    others: list[CapturedTable],
    chain: tuple[list[LsnRange], Lsn | None],
    times: RangeTimes,
) -> Iterator[AssetMaterialization]:
    """The range for the tables this run does not work on, where they are quiet
    (:mod:`.sync.quiet_ranges`): one sync-state write; their reports to Dagster, each with its
    checks' results (``chain``: the ranges back to this one's start and the retired end;
    ``times``: the range's commit times, asked of the source once per run)."""
    if not others:
        return
    partition = context.partition_key
    lsn_range = parse_partition(partition)
    assert lsn_range is not None
    sync = SourceSync.load(source)
    quiet = quiet_tables(conn, catalog, sync, others, lsn_range)
    updates, reports = record_quiet(
        source, sync, quiet, lsn_range, partition, lambda: quiet_range_metadata(conn, times)
    )
    # rows read from the tables' own stores (none yet in the state) are written down too
    updates = {**{t: sync[t] for t in sync.missing}, **updates}
    sync.write(spark, updates)
    context.log.info(
        f"{len(quiet)} of {len(others)} tables not in this run recorded quiet in range "
        f"{partition} (no change rows, range covered)"
    )
    ranges, retired = chain
    by_asset = {k: t for t in quiet for k in (t.change_log_key, t.mirror_key, t.history_key)}
    view = ChainEndView.read(context.instance, source) if reports else None  # the chain now
    for report in reports:
        yield report
        # Its checks, in the same run: the UI shows a check passed only when its latest result
        # is for the asset's latest materialization.
        table = by_asset[report.asset_key]
        if report.asset_key == table.change_log_key:
            results = [
                quiet_coverage_result(table, lsn_range),
                chain_result(table, lsn_range, ranges, sync[table].snapshot, retired),
            ]
            for result in results:
                context.log_event(as_evaluation(result, partition))
        elif report.asset_key == table.history_key:
            assert view is not None
            at_end = history_at_chain_end(view, table, lsn_range.hi, updates[table])
            context.log_event(as_evaluation(at_end, None))
        else:
            assert view is not None
            at_end = view.result(table.mirror_key, table, lsn_range.hi, updates[table])
            context.log_event(as_evaluation(at_end, None))


def _not_written(table: CapturedTable, why: str) -> Output:
    """The output of a table whose range wrote nothing. Dagster skips a step when an output it
    depends on is missing, so without it the mirrors step would not run for any table; the
    materialization it records says that nothing was written, and the failed ``coverage``
    check shows the table red. The sensor goes by what is stored, not by this event: the table
    is behind, and its next attempt reads from where it stopped."""
    return Output(
        None,
        output_name=table.change_log_key.to_python_identifier(),
        metadata={"written": False, "not_written_because": MetadataValue.text(why[:2000])},
    )


def _key(result: AssetCheckResult) -> AssetCheckKey:
    assert result.asset_key is not None
    return AssetCheckKey(result.asset_key, result.check_name or "")


def _source_table_event(
    table: CapturedTable, partition: str, changed: dict[str, int], instance: CaptureInstance
) -> AssetMaterialization | None:
    """What the run learnt about the SQL Server table (an external asset): read by a snapshot,
    or changed in the range. Logged before the change log's output, so the change log is never
    older than its source in the UI (no "upstream changed" badge); a quiet table logs nothing:
    it did not change."""
    if partition == SNAPSHOT_PARTITION:
        return AssetMaterialization(
            asset_key=table.source_key,
            description=f"{table.qualified_name} read whole by the snapshot "
            f"(capture instance {instance.name})",
            metadata={"read_by": SNAPSHOT_PARTITION, "capture_instance": instance.name},
        )
    changes = changed.get(instance.name)
    if not changes:
        return None
    return AssetMaterialization(
        asset_key=table.source_key,
        description=f"{table.qualified_name} changed: {changes:,} change rows in range {partition}",
        metadata={"change_rows": changes, "lsn_range": partition},
    )


def _instance_names(
    catalog: dict[tuple[str, str], SourceTable], tables: list[CapturedTable]
) -> list[str]:
    """The established capture instances of ``tables`` (at most two per table)."""
    names = {
        instance.name
        for table in tables
        if (found := catalog.get((table.schema, table.name))) is not None
        for instance in found.instances
        if instance.is_valid
    }
    return sorted(names)
