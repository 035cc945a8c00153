"""What one change-log partition writes, decided before the write: a snapshot read at once or a
batch of key ranges at a time (resumed where an unfinished one stopped), or the change rows of a
range, each a typed write of :mod:`cdc_assets.spark.change_log_store` that the IO manager commits
(the store computes the properties: a snapshot's from its rows, a range's rows per operation,
commit times, lag and validity interval from the source after the read); and how each
partition's properties read in Dagster."""

import uuid
from collections.abc import Callable
from typing import Any

from dagster import Failure, MetadataValue
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import sqlserver_source
from cdc_assets.spark.change_log_properties import range_of
from cdc_assets.spark.change_log_store import ChunkedSnapshotWrite, RangeWrite, SnapshotWrite
from cdc_assets.spark.session import write_parallelism
from cdc_assets.spark.snapshot_chunks import BatchCommitted, SnapshotProgress
from cdc_assets.spark.stored_type_changes import start_over_with_types
from cdc_assets.sqlserver import CaptureInstance, SourceTable, get_min_lsn
from cdc_assets.sqlserver.column_masks import rules_fingerprint
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.range_facts import RangeTimes

from .change_log_state import snapshot_progress
from .io_manager import AssetWrite
from .metadata import COLUMN_LINEAGE, column_lineage, column_rules_text, operation_counts
from .names import SNAPSHOT_PARTITION
from .snapshot_resume import INITIAL_REASON, Progress, capture_instance_start, resume_decision
from .source import CapturedTable, Source
from .sync_state import forget_snapshot


def instance_for(
    found: SourceTable | None, table: CapturedTable, first: Lsn | None
) -> CaptureInstance:
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


def snapshot_output(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    instance: CaptureInstance,
    reason: str | None,
    conn: DbapiConnection,
    *,
    log: Callable[[str], None] = lambda _: None,
    report: Callable[[Progress], None] = lambda _: None,
) -> AssetWrite:
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
    # a column rule that changed a stored type: the change log starts over under the new types
    path = table.change_log_key.path
    schema = sqlserver_source.snapshot_frame_schema(plan)
    if retyped := start_over_with_types(spark, source.store, path, schema):
        log(
            f"{table.qualified_name}: columns {', '.join(retyped)} are stored with another type "
            "from this snapshot on (column rules): the change log's earlier partitions are "
            "dropped"
        )
    if len(plan.key_ranges) > 1:
        return _chunked(spark, source, table, instance, plan, None, report, reason)
    identity = _identity(instance, plan.mode, reason, plan.rows)
    return AssetWrite(SnapshotWrite(plan, instance, identity), _snapshot_metadata(table, instance))


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
    table: CapturedTable, instance: CaptureInstance
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
    table: CapturedTable,
    instance: CaptureInstance,
    plan: sqlserver_source.ReadPlan,
    resume: SnapshotProgress | None,
    report: Callable[[Progress], None],
    reason: str | None = None,
) -> AssetWrite:
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

    if resume is None:
        # A new snapshot's first commit replaces the table's 'snapshot' partition: from now on
        # the table has no snapshot until this one is complete (an unfinished one is none).
        forget_snapshot(spark, source, table)
    chunked = ChunkedSnapshotWrite(
        plan,
        instance,
        identity,
        write_id=write_id,
        resume=resume,
        chunks_per_commit=per_commit,
        on_commit=on_commit,
    )
    return AssetWrite(chunked, _snapshot_metadata(table, instance))


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
    source: Source,
    table: CapturedTable,
    conn: DbapiConnection,
    lsn_range: LsnRange,
    instance: CaptureInstance,
    read_range: LsnRange | None,
    times: RangeTimes,
    *,
    change_rows: int | None = None,
) -> AssetWrite:
    """The change log of ``table`` for ``lsn_range``: the rows of ``read_range`` (its part above
    the table's snapshot); ``change_rows``: how many ``lsn_range`` has for ``instance``, when
    counted: none, and nothing is read from the source and no Spark job counts them; a few,
    and they are read in the driver, no Spark job either (:class:`RangeWrite`)."""
    written = RangeWrite(
        source.config.connection_settings(),
        conn,
        instance,
        (table.schema, table.name),
        lsn_range,
        read_range,
        times,
        change_rows=change_rows,
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

    return AssetWrite(written, metadata)
