"""What one change-log partition writes: the frame read from the source (the rows at the snapshot
LSN, or the change rows of a range) and the properties published with it, computed after the
write: a snapshot's row count from the written data; a range's rows per operation, commit times
and lag from the source (queries, no Spark job), and the validity interval after the read that
the ``coverage`` check judges."""

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from dagster import Failure, MetadataValue
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.records import Coverage, RangeProperties
from cdc_assets.spark import sqlserver_source
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.change_log_properties import range_of, range_properties
from cdc_assets.spark.commit_metadata import Published
from cdc_assets.spark.driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from cdc_assets.spark.session import write_parallelism
from cdc_assets.spark.snapshot_chunks import BatchCommitted, SnapshotProgress, write_in_chunks
from cdc_assets.sqlserver import (
    CaptureInstance,
    SourceTable,
    count_changes_unchecked,
    get_max_lsn,
    get_min_lsn,
    get_server_time,
    range_stats,
)
from cdc_assets.sqlserver.catalog import get_source_columns
from cdc_assets.sqlserver.column_masks import rules_fingerprint
from cdc_assets.sqlserver.dbapi import DbapiConnection

from .change_log_state import snapshot_progress
from .io_manager import StoredFrame
from .metadata import (
    COLUMN_LINEAGE,
    OPERATION_NAMES,
    column_lineage,
    column_rules_text,
    operation_counts,
)
from .names import SNAPSHOT_PARTITION
from .snapshot_resume import INITIAL_REASON, Progress, capture_instance_start, resume_decision
from .source import Source, Table
from .sync_state import forget_snapshot


def instance_for(found: SourceTable | None, table: Table, first: Lsn | None) -> CaptureInstance:
    """The capture instance as it is now (``found``: the table as discovered at the start of the
    run): the one covering ``first``, else the current one (when cleanup moved every instance's
    start above ``first``, the coverage check reports it)."""
    instance = None
    if found is not None:
        if first is not None:
            instance = found.instance_covering(first)
        instance = instance or found.current_instance
    if instance is None:
        raise Failure(
            f"{table.qualified_name}: no capture instance "
            + ("is established" if first is None else f"covers LSN {first.hex}")
            + ". Check that CDC is still enabled on the table (sys.sp_cdc_help_change_data_capture)"
            " and that the capture job runs."
        )
    return instance


def _server_now(conn: DbapiConnection) -> dt.datetime:
    return get_server_time(conn) or dt.datetime.now()


def _operation_counts(
    conn: DbapiConnection, instance: CaptureInstance, read_range: LsnRange
) -> dict[str, int]:
    """Change rows per operation in ``read_range``: what the range's read returned, counted by
    the source (one query, no Spark job) before the coverage check that proves cleanup removed
    none of them."""
    counts = count_changes_unchecked(conn, instance, read_range)
    return {OPERATION_NAMES.get(op, str(op)): n for op, n in counts.items()}


def snapshot_output(
    spark: SparkSession,
    source: Source,
    table: Table,
    instance: CaptureInstance,
    reason: str | None,
    conn: DbapiConnection,
    *,
    log: Callable[[str], None] = lambda _: None,
    report: Callable[[Progress], None] = lambda _: None,
) -> StoredFrame:
    """The ``snapshot`` partition of ``table``: one commit for a table of one key range, else a
    commit per batch of key ranges that resumes an unfinished snapshot where it stopped
    (:mod:`.snapshot_resume`); ``log`` gets the run's lines about that, ``report`` the progress
    after each commit."""
    settings = source.config.connection_settings()
    policy = source.config.snapshot
    unfinished = snapshot_progress(source, table)
    min_lsn = get_min_lsn(conn, instance.name) if unfinished is not None else Lsn.ZERO
    resume, decided = resume_decision(unfinished, instance, min_lsn, reason)
    if decided is not None:
        log(decided)
    if resume is not None:
        left = resume.properties.get("rows_expected")
        plan = sqlserver_source.plan_snapshot(
            settings,
            instance,
            mode=policy.mode,
            chunk_rows=policy.chunk_rows,
            after=resume.last_key,
            rows_after=max(0, int(left) - resume.rows) if isinstance(left, int) else None,
        )
        return _chunked(spark, source, table, instance, plan, resume, report)
    plan = sqlserver_source.plan_snapshot(
        settings, instance, mode=policy.mode, chunk_rows=policy.chunk_rows
    )
    if len(plan.key_ranges) > 1:
        return _chunked(spark, source, table, instance, plan, None, report, reason)
    mode = plan.mode
    # A small table is read here, in the driver: a Spark task and the jobs that read its rows
    # back (the summary, the size check) cost more than its rows (a thousand small tables).
    small = (plan.rows or 0) <= DRIVER_WRITE_ROWS
    df = None if small else sqlserver_source.load_snapshot(spark, plan)
    in_driver = (
        RowsInDriver(
            sqlserver_source.snapshot_frame_schema(plan),
            lambda: sqlserver_source.read_snapshot_in_driver(plan),
        )
        if small
        else None
    )

    def finalize(written: DataFrame | pa.Table) -> dict[str, Any]:
        replay_from, snapshot_lsn, rows = sqlserver_source.snapshot_summary(written)
        return {
            **_identity(instance, mode, reason, plan.rows),
            "replay_from": replay_from.hex,
            "snapshot_lsn": snapshot_lsn.hex,
            "rows": rows,
            "taken_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }

    # the ranges' columns too: a range without changes is then a properties row alone
    later = sqlserver_source.empty_change_frame(spark, instance)
    return StoredFrame(
        df,
        finalize,
        _snapshot_metadata(table, instance),
        later_columns=later,
        rows=plan.rows,
        in_driver=in_driver,
    )


def _identity(
    instance: CaptureInstance, mode: str, reason: str | None, rows_expected: int | None
) -> dict[str, Any]:
    """What every commit of a table's snapshot says about it (the last one among the rest);
    with column rules, their fingerprint (a change re-snapshots: :mod:`.column_rule_changes`)."""
    identity: dict[str, Any] = {
        "kind": SNAPSHOT_PARTITION,
        "capture_instance": instance.name,
        "capture_instance_start": capture_instance_start(instance),
        "mode": mode,
        "reason": reason or INITIAL_REASON,
        "rows_expected": rows_expected,
    }
    if fingerprint := rules_fingerprint(instance):
        identity["column_rules"] = fingerprint
    return identity


def _snapshot_metadata(
    table: Table, instance: CaptureInstance
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def metadata(p: dict[str, Any]) -> dict[str, Any]:
        found = {
            "dagster/row_count": p["rows"],
            "snapshot_lsn": p["snapshot_lsn"],
            "replay_from": MetadataValue.text(p["replay_from"]),
            "snapshot_mode": p["mode"],
            "capture_instance": p["capture_instance"],
            "snapshot_reason": MetadataValue.text(p["reason"]),
            COLUMN_LINEAGE: column_lineage(instance.column_names, table.source_key),
        }
        if isinstance(p.get("rows_expected"), int):
            found["snapshot_rows_expected"] = p["rows_expected"]
        if p.get("column_rules"):  # the rules it was read under (a change re-snapshots)
            found["column_rules"] = MetadataValue.text(column_rules_text(instance))
        if isinstance(p.get("commit_seq"), int):  # written a batch of key ranges per commit
            found["snapshot_chunks"] = p["chunks_done"]
            found["snapshot_commits"] = p["commit_seq"] + 1
            found["snapshot_resumes"] = p["resumes"]
            found["snapshot_started_at"] = p["started_at"]
        return found

    return metadata


def _chunked(
    spark: SparkSession,
    source: Source,
    table: Table,
    instance: CaptureInstance,
    plan: sqlserver_source.ReadPlan,
    resume: SnapshotProgress | None,
    report: Callable[[Progress], None],
    reason: str | None = None,
) -> StoredFrame:
    """The snapshot written a batch of key ranges at a time (:mod:`.snapshot_resume`)."""
    policy = source.config.snapshot
    mode: str = plan.mode
    if resume is not None:
        reason = str(resume.properties.get("reason") or INITIAL_REASON)
        if resume.properties.get("mode") != mode:
            mode = "fuzzy"  # chunks of both kinds: not one snapshot transaction
    identity = _identity(instance, mode, reason, plan.rows)
    per_commit = policy.chunks_per_commit or write_parallelism(spark)
    write_id = resume.write_id if resume is not None else uuid.uuid4().hex

    def on_commit(batch: BatchCommitted) -> None:
        report(Progress.of(table.qualified_name, batch, plan.rows))

    def write(spark: SparkSession, store: AssetStore, key_path: Sequence[str]) -> Published:
        published = write_in_chunks(
            spark,
            store,
            key_path,
            SNAPSHOT_PARTITION,
            plan,
            identity=identity,
            write_id=write_id,
            resume=resume,
            chunks_per_commit=per_commit,
            later_columns=sqlserver_source.empty_change_frame(spark, instance),
            before_first_commit=lambda: forget_snapshot(spark, source, table),
            on_commit=on_commit,
        )
        return published

    return StoredFrame(None, metadata=_snapshot_metadata(table, instance), write=write)


class RangeTimes:
    """The range's transactions, first and last commit time and lag (kept with a range): the
    same for every table of the run, so asked of the source once, by the first table that needs
    them (on that thread's connection), not once per changed table."""

    def __init__(self, lsn_range: LsnRange) -> None:
        self._range = lsn_range
        self._lock = threading.Lock()
        self._times: dict[str, Any] | None = None

    def get(self, conn: DbapiConnection) -> dict[str, Any]:
        with self._lock:
            if self._times is None:
                stats = range_stats(conn, self._range)
                last = stats.last_commit
                self._times = {
                    "transactions": stats.transactions,
                    "first_commit": stats.first_commit.isoformat() if stats.first_commit else None,
                    "last_commit": last.isoformat() if last else None,
                    "lag_seconds": (_server_now(conn) - last).total_seconds() if last else None,
                }
            return dict(self._times)


def _range_metadata(times: dict[str, Any], operations: dict[str, int]) -> dict[str, Any]:
    """How a range reads in Dagster: commit times, transactions, rows per operation, lag."""
    return {
        "commit_time_range": f"{times['first_commit']} .. {times['last_commit']}",
        "transactions": times["transactions"],
        **operation_counts(operations),
        "lag_seconds": MetadataValue.float(float(times["lag_seconds"] or 0.0)),
    }


def quiet_range_metadata(conn: DbapiConnection, times: RangeTimes) -> dict[str, Any]:
    """What a quiet table's change-log report shows of its range, as a written range shows it
    (0 rows of each operation): a range is found by commit time in any table's partitions."""
    return _range_metadata(times.get(conn), {})


def range_output(
    spark: SparkSession,
    source: Source,
    table: Table,
    conn: DbapiConnection,
    lsn_range: LsnRange,
    instance: CaptureInstance,
    read_range: LsnRange | None,
    times: RangeTimes,
    *,
    change_rows: int | None = None,
) -> StoredFrame:
    """The change log of ``table`` for ``lsn_range``: the rows of ``read_range`` (its part above
    the table's snapshot); ``change_rows``: how many ``lsn_range`` has for ``instance``, when
    counted: none, and nothing is read from the source and no Spark job counts them; a few,
    and they are read in the driver, no Spark job either."""
    settings = source.config.connection_settings()
    empty = read_range is None or change_rows == 0
    df: DataFrame | None = None
    in_driver: RowsInDriver | None = None
    if empty:
        df = sqlserver_source.empty_change_frame(spark, instance)
    elif change_rows is not None and change_rows <= DRIVER_WRITE_ROWS:
        assert read_range is not None
        in_driver = RowsInDriver(
            sqlserver_source.change_frame_schema(instance),
            lambda: sqlserver_source.read_changes_in_driver(settings, instance, read_range),
        )
    else:
        assert read_range is not None
        df = sqlserver_source.read_change_range(spark, settings, instance, read_range)

    def finalize(written: DataFrame | pa.Table) -> dict[str, Any]:
        # counted by the source, then proven complete with the read by the check below
        operations = (
            {} if empty or read_range is None else _operation_counts(conn, instance, read_range)
        )
        # After the rows are written, the range must still lie in the validity interval: if
        # cleanup moved the min LSN past lo + 1 during the read, rows may be missing.
        minimum = get_min_lsn(conn, instance.name)
        maximum = get_max_lsn(conn)
        reasons = []
        if read_range is not None and minimum > read_range.first:
            reasons.append(
                f"cleanup moved the min LSN of {instance.name} to {minimum.hex}, above lo + 1 = "
                f"{read_range.first.hex}: changes of this range may have been removed"
            )
        if lsn_range.hi > maximum:
            reasons.append(f"hi {lsn_range.hi.hex} is above the max LSN {maximum.hex}")
        captured = set(instance.column_names) | set(instance.excluded_columns)
        not_captured = [
            c.name
            for c in get_source_columns(conn, table.schema, table.name)
            if c.name not in captured
        ]
        read = times.get(conn)
        return range_properties(
            RangeProperties(
                lsn_range=lsn_range,
                capture_instance=instance.name,
                # The table's snapshot holds the changes up to its replay LSN: only those above
                # it are read (none when it covers the whole range, e.g. after a re-snapshot).
                read_from=read_range.lo if read_range is not None else lsn_range.hi,
                rows=sum(operations.values()),
                operations=operations,
                transactions=read["transactions"],
                first_commit=read["first_commit"],
                last_commit=read["last_commit"],
                lag_seconds=read["lag_seconds"],
                read_at=dt.datetime.now(dt.UTC).isoformat(),
                columns_not_captured=tuple(not_captured),
                coverage=Coverage(
                    ok=not reasons, min_lsn=minimum, max_lsn=maximum, reason="; ".join(reasons)
                ),
            )
        )

    def metadata(p: dict[str, Any]) -> dict[str, Any]:
        r = range_of(p)
        assert r is not None, "a range partition's properties name its range"
        lo, hi = r.lsn_range.lo.hex, r.lsn_range.hi.hex
        return {
            "dagster/row_count": r.rows,
            "lsn_range": f"({lo}, {hi}]",
            **_range_metadata(p, dict(r.operations)),
            "capture_instance": r.capture_instance,
            "columns_not_captured": MetadataValue.text(
                ", ".join(r.columns_not_captured)
                + f": the source table has them, capture instance {r.capture_instance} does "
                "not, so the mirror lacks them. To capture them, create a second capture "
                "instance (sys.sp_cdc_enable_table … @capture_instance = N'<new name>'); the "
                "table is then re-snapshotted with it."
                if r.columns_not_captured
                else "none"
            ),
            COLUMN_LINEAGE: column_lineage(instance.column_names, table.source_key),
        }

    return StoredFrame(df, finalize, metadata, empty=empty, in_driver=in_driver)
