"""Checks on the mirrors, run by the health job every 5 minutes and on demand (the UI's "Execute
checks"):

- ``at_chain_end``: the mirror is at the end of the LSN chain (the last range's ``hi``), or the
  ranges past it are on their way; it fails only when the sync is stuck for it
  (:mod:`.sync.chain_end_check`, which also judges it in every range run);
- ``reconcile``: the mirror holds as many rows as the source table had at the mirror's LSN.

The source's row count at the mirror's LSN ``M`` comes from one exact snapshot at ``S`` (all
tables of the source locked together, counted in the same SNAPSHOT transaction) corrected by the
captured changes in ``(M, S]``: inserts minus deletes (updates, including key updates captured as
delete + insert pairs, leave the count as it is). So the source keeps writing while it runs.
"""

from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckKey,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    multi_asset_check,
)
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import mirror_versions
from cdc_assets.sqlserver import (
    CaptureNotReady,
    SnapshotIsolationNotAllowed,
    SqlServerError,
    begin_exact_snapshot,
    capture_health,
    count_changes,
    count_rows,
    find_max_lsn,
    wait_for_max_lsn,
)

from .health_checks import START_CAPTURE
from .mirror import mirror_position
from .sync.chain_end_check import AT_CHAIN_END, ChainEndView
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync

RECONCILE = "reconcile"
INSERT, DELETE = 2, 1
CAPTURE_WAIT_SECONDS = 120.0


def source_counts(
    source: Source, tables: list[CapturedTable]
) -> tuple[Lsn, dict[CapturedTable, int]]:
    """Row counts of ``tables`` in one exact snapshot, and its LSN."""
    snapshot = begin_exact_snapshot(source.factory, [t.instance for t in tables])
    try:
        counts = {t: count_rows(snapshot.conn, t.schema, t.name) for t in tables}
    finally:
        snapshot.close()
    return snapshot.lsn, counts


# counts of the newest version while a sync run merges ranges beside the check
COUNT_ATTEMPTS = 3
# Delta's refusal to read a version older than the table's deletedFileRetentionDuration
TIME_TRAVEL_REFUSED = "DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION"


def _mirror_at(spark: SparkSession, source: Source, table: CapturedTable) -> tuple[Lsn, int] | None:
    """The mirror's LSN and its row count, both of one Delta version (a sync run may merge
    the next range meanwhile); None before its first materialization.

    The rows are those of the version whose commit recorded the position (time travel). Delta
    refuses that once the commit is older than the table's ``deletedFileRetentionDuration``
    (maintenance sets it to ``keep_history``: a quiet mirror's position commit gets that old);
    then the newest version is counted, whose later commits (the writer's compaction,
    maintenance's retention) change no row, and counted again if a range merged meanwhile."""
    path = table.mirror_key.path
    found = source.store.commit_properties(path)
    position = mirror_versions.position_of(found[1]) if found is not None else None
    if found is None or position is None or position.lsn is None:
        return None
    try:
        return position.lsn, source.store.read(spark, path, None, version=found[0]).count()
    except Exception as exc:
        if TIME_TRAVEL_REFUSED not in str(exc):
            raise
    for _ in range(COUNT_ATTEMPTS):
        rows = source.store.read(spark, path, None).count()
        again = source.store.commit_properties(path)
        if again is not None and again[0] == found[0]:
            return position.lsn, rows
        found = again
        position = mirror_versions.position_of(found[1]) if found is not None else None
        if found is None or position is None or position.lsn is None:
            return None
    raise RuntimeError(
        f"{table.qualified_name}: the mirror moved during each of {COUNT_ATTEMPTS} counts; "
        "reconcile runs again with the health job"
    )


def _capture_not_past(source: Source, lsn: Lsn) -> str | None:
    """None once the capture job has passed ``lsn``; else why the changes up to it cannot be
    counted. At once when SQL Server Agent reports the continuous capture job stopped (no wait
    could end well), after CAPTURE_WAIT_SECONDS of polling the max LSN otherwise."""
    conn = source.connect()
    try:
        current = find_max_lsn(conn)
        if current is not None and current >= lsn:
            return None
        if capture_health(conn).stopped:
            return (
                "the capture job is stopped (SQL Server Agent reports no running session), so "
                f"the changes since the mirror cannot be counted: start it ({START_CAPTURE}); "
                "capture_health tells more"
            )
        wait_for_max_lsn(conn, lsn, timeout_s=CAPTURE_WAIT_SECONDS)
        return None
    except CaptureNotReady:
        return (
            f"the capture job has not passed the counted LSN {lsn.hex} within "
            f"{CAPTURE_WAIT_SECONDS:g} s, so the changes since the mirror cannot be counted: "
            "is it running (capture_health tells)?"
        )
    finally:
        conn.close()


def _not_counted(table: CapturedTable, why: str) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=table.mirror_key,
        check_name=RECONCILE,
        passed=False,
        severity=AssetCheckSeverity.WARN,
        description=why,
    )


def _reconcile(
    source: Source,
    table: CapturedTable,
    snapshot_lsn: Lsn,
    count_at_s: int,
    mirror: tuple[Lsn, int],
) -> AssetCheckResult:
    at, mirror_rows = mirror
    conn = source.connect()
    try:
        ops: dict[int, int] = {}
        if snapshot_lsn > at:
            ops = count_changes(conn, table.instance, LsnRange(at, snapshot_lsn))
    except SqlServerError as exc:
        return _not_counted(table, f"could not count the changes after the mirror's LSN: {exc}")
    finally:
        conn.close()
    expected = count_at_s - ops.get(INSERT, 0) + ops.get(DELETE, 0)
    metadata: dict[str, Any] = {
        "mirror_lsn": at.hex,
        "mirror_rows": mirror_rows,
        "source_rows_at_mirror_lsn": expected,
        "source_rows_now": count_at_s,
        "counted_at_lsn": snapshot_lsn.hex,
    }
    return AssetCheckResult(
        asset_key=table.mirror_key,
        check_name=RECONCILE,
        passed=expected == mirror_rows,
        severity=AssetCheckSeverity.ERROR,
        description="the mirror has as many rows as the source had at its LSN"
        if expected == mirror_rows
        else f"the mirror has {mirror_rows} rows, the source had {expected} at "
        f"{at.hex}. Re-snapshot the table (materialize its 'snapshot' partition) and report "
        "this: it is a bug or a change made outside CDC.",
        metadata=metadata,
    )


def build_mirror_checks(source: Source) -> AssetChecksDefinition:
    by_key = {t.mirror_key: t for t in source.tables}
    specs = [
        spec
        for t in source.tables
        for spec in (
            AssetCheckSpec(
                AT_CHAIN_END,
                asset=t.mirror_key,
                description="The mirror is at the end of the LSN chain, or the ranges past it "
                "are on their way (asked for, queued or running); fails when the sync is stuck "
                "for it (a failed run not retried, a run that does not start, a range without "
                "a run), saying which and what to do.",
            ),
            AssetCheckSpec(
                RECONCILE,
                asset=t.mirror_key,
                description="The mirror has as many rows as the source table had at the "
                "mirror's LSN (counted in an exact snapshot, corrected by the changes since).",
            ),
        )
    ]

    @multi_asset_check(
        name=f"{source.name}_mirror_checks",
        specs=specs,
        can_subset=True,
        required_resource_keys={"pyspark"},
        description=f"On-demand checks of the mirrors of source '{source.name}'.",
    )
    def mirror_checks(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        wanted = context.selected_asset_check_keys
        tables = sorted({by_key[k.asset_key] for k in wanted}, key=lambda t: t.mirror_key.path)
        ending = [t for t in tables if AssetCheckKey(t.mirror_key, AT_CHAIN_END) in wanted]
        if ending:
            sync = SourceSync.load(source)
            view = ChainEndView.read(context.instance, source)
            for table in ending:
                position = mirror_position(source, table, sync)
                at = position.lsn if position is not None else None
                yield view.result(table.mirror_key, table, at, sync[table])
        reconciling = [
            t
            for t in tables
            if any(k.asset_key == t.mirror_key and k.name == RECONCILE for k in wanted)
        ]
        if not reconciling:
            return
        spark = context.resources.pyspark.spark_session
        mirrors = {t: found for t in reconciling if (found := _mirror_at(spark, source, t))}
        try:
            snapshot_lsn, counts = source_counts(source, reconciling)
        except (SnapshotIsolationNotAllowed, SqlServerError) as exc:
            for table in reconciling:
                yield _not_counted(table, f"could not count the source at one LSN: {exc}")
            return
        behind = [t for t in mirrors if mirrors[t][0] < snapshot_lsn]
        try:  # once for the source: the changes up to S must be captured to count
            why = _capture_not_past(source, snapshot_lsn) if behind else None
        except SqlServerError as exc:
            why = f"could not count the changes since the mirror: {exc}"
        if why is not None:
            for table in reconciling:
                yield _not_counted(table, why)
            return
        for table in reconciling:
            if table not in mirrors:
                yield _not_counted(table, "the mirror has not been materialized yet")
                continue
            yield _reconcile(source, table, snapshot_lsn, counts[table], mirrors[table])

    return mirror_checks
