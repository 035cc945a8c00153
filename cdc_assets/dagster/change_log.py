"""``cdc/<source>/<schema>/<table>``: each table's change log as partitions of one source-wide
dynamic partitions definition — ``snapshot`` (the rows at the snapshot LSN) and ``<lo>-<hi>`` (the
change rows with ``lo < __$start_lsn <= hi``).

One multi-asset per source, so one run reads a range for every table of the source: the reads
are Spark jobs whose tasks open their own connections on the executors
(:mod:`cdc_assets.spark.sqlserver_source`). Each output is published with properties computed
from the written data, and two blocking checks per table follow it:

- ``coverage``: after the write, the capture instance's min LSN is still at or below ``lo + 1``
  and ``hi`` is at or below the max LSN — cleanup did not remove changes under the read;
- ``chain``: ``lo`` is the previous range's ``hi``, or at or below the table's snapshot LSN.

A failed check fails the step, so the mirrors of the source do not move in that run.
"""

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetOut,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    MetadataValue,
    Output,
    multi_asset,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import Lsn, LsnError, LsnRange
from cdc_assets.spark import sqlserver_source
from cdc_assets.sqlserver import (
    CaptureInstance,
    SourceTable,
    discover,
    get_max_lsn,
    get_min_lsn,
    range_stats,
)
from cdc_assets.sqlserver.catalog import get_source_columns
from cdc_assets.sqlserver.changes import check_range_available
from cdc_assets.sqlserver.dbapi import DbapiConnection, fetch_value
from cdc_assets.sqlserver.errors import LsnNotAvailable, SqlServerError
from cdc_assets.sqlserver.health import SERVER_TIME_QUERY

from .chain import SnapshotInfo, recent_ranges, retired_through
from .io_manager import StoredFrame
from .metadata import (
    COLUMN_LINEAGE,
    OPERATION_NAMES,
    asset_tags,
    column_lineage,
    operation_counts,
    table_metadata,
)
from .names import RESNAPSHOT_TAG, SNAPSHOT_PARTITION, group_name
from .source import Source, Table

COVERAGE = "coverage"
CHAIN = "chain"
BLOCKING = (COVERAGE, CHAIN)  # the checks that run with every change-log partition
KINDS = {"sqlserver", "spark", "parquet"}
IO_MANAGER = "cdc_io_manager"


def snapshot_info(source: Source, table: Table) -> SnapshotInfo | None:
    path = table.change_log_key.path
    version = source.store.current_version(path, SNAPSHOT_PARTITION)
    return SnapshotInfo.from_properties(
        source.store.properties(path, SNAPSHOT_PARTITION), version.name if version else None
    )


def parse_partition(key: str) -> LsnRange | None:
    """None for ``snapshot``; the range for a range key; a clear failure for anything else."""
    if key == SNAPSHOT_PARTITION:
        return None
    try:
        return LsnRange.parse_key(key)
    except LsnError as exc:
        raise Failure(
            f"partition key {key!r} is neither 'snapshot' nor an LSN range '<lo>-<hi>' "
            f"(20 hex digits each): {exc}. Pick a partition the sync sensor created."
        ) from None


def _instance_for(found: SourceTable | None, table: Table, first: Lsn | None) -> CaptureInstance:
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
    value = fetch_value(conn, SERVER_TIME_QUERY)
    return value if isinstance(value, dt.datetime) else dt.datetime.now()


def _operation_counts(written: DataFrame) -> dict[str, int]:
    rows = written.groupBy(F.col("`__$operation`")).count().collect()
    return {OPERATION_NAMES.get(int(r[0]), str(r[0])): int(r[1]) for r in rows}


def _snapshot_output(
    spark: SparkSession, source: Source, table: Table, instance: CaptureInstance, reason: str | None
) -> StoredFrame:
    settings = source.config.connection_settings()
    policy = source.config.snapshot
    mode = sqlserver_source.resolve_snapshot_mode(settings, instance, policy.mode)
    df = sqlserver_source.read_snapshot(
        spark, settings, instance, mode=mode, chunk_rows=policy.chunk_rows
    )

    def finalize(written: DataFrame) -> dict[str, Any]:
        replay_from, snapshot_lsn = sqlserver_source.snapshot_bounds(written)
        return {
            "kind": SNAPSHOT_PARTITION,
            "capture_instance": instance.name,
            "mode": mode,
            "replay_from": replay_from.hex,
            "snapshot_lsn": snapshot_lsn.hex,
            "rows": sqlserver_source.snapshot_rows(written).count(),
            "taken_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "reason": reason or "initial snapshot",
        }

    def metadata(p: dict[str, Any]) -> dict[str, Any]:
        return {
            "dagster/row_count": p["rows"],
            "snapshot_lsn": p["snapshot_lsn"],
            "replay_from": MetadataValue.text(p["replay_from"]),
            "snapshot_mode": p["mode"],
            "capture_instance": p["capture_instance"],
            "snapshot_reason": MetadataValue.text(p["reason"]),
            COLUMN_LINEAGE: column_lineage(instance.column_names, table.source_key),
        }

    return StoredFrame(df, finalize, metadata)


def _range_output(
    spark: SparkSession,
    source: Source,
    table: Table,
    conn: DbapiConnection,
    lsn_range: LsnRange,
    instance: CaptureInstance,
    read_range: LsnRange | None,
) -> StoredFrame:
    settings = source.config.connection_settings()
    if read_range is None:
        df = sqlserver_source.empty_change_frame(spark, instance)
    else:
        df = sqlserver_source.read_change_range(spark, settings, instance, read_range)

    def finalize(written: DataFrame) -> dict[str, Any]:
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
        operations = _operation_counts(written)  # one Spark job gives the row count too
        captured = set(instance.column_names)
        not_captured = [
            c.name
            for c in get_source_columns(conn, table.schema, table.name)
            if c.name not in captured
        ]
        stats = range_stats(conn, lsn_range)
        now = _server_now(conn)
        lag = (now - stats.last_commit).total_seconds() if stats.last_commit else None
        return {
            "kind": "range",
            "capture_instance": instance.name,
            "lo": lsn_range.lo.hex,
            "hi": lsn_range.hi.hex,
            # The table's snapshot holds the changes up to its replay LSN: only those above it
            # are read (none when it covers the whole range, e.g. after a re-snapshot).
            "read_from": read_range.lo.hex if read_range is not None else lsn_range.hi.hex,
            "rows": sum(operations.values()),
            "operations": operations,
            "transactions": stats.transactions,
            "first_commit": stats.first_commit.isoformat() if stats.first_commit else None,
            "last_commit": stats.last_commit.isoformat() if stats.last_commit else None,
            "lag_seconds": lag,
            "read_at": dt.datetime.now(dt.UTC).isoformat(),
            "columns_not_captured": not_captured,
            "coverage": {
                "ok": not reasons,
                "min_lsn": minimum.hex,
                "max_lsn": maximum.hex,
                "reason": "; ".join(reasons),
            },
        }

    def metadata(p: dict[str, Any]) -> dict[str, Any]:
        return {
            "dagster/row_count": p["rows"],
            "lsn_range": f"({p['lo']}, {p['hi']}]",
            "commit_time_range": f"{p['first_commit']} .. {p['last_commit']}",
            "transactions": p["transactions"],
            **operation_counts(p["operations"]),
            "lag_seconds": MetadataValue.float(float(p["lag_seconds"] or 0.0)),
            "capture_instance": p["capture_instance"],
            "columns_not_captured": MetadataValue.text(
                ", ".join(p["columns_not_captured"])
                + f": the source table has them, capture instance {p['capture_instance']} does "
                "not, so the mirror lacks them. To capture them, create a second capture "
                "instance (sys.sp_cdc_enable_table … @capture_instance = N'<new name>'); the "
                "table is then re-snapshotted with it."
                if p["columns_not_captured"]
                else "none"
            ),
            COLUMN_LINEAGE: column_lineage(instance.column_names, table.source_key),
        }

    return StoredFrame(df, finalize, metadata)


def effective_range(lsn_range: LsnRange, snapshot: SnapshotInfo | None) -> LsnRange | None:
    """The part of ``lsn_range`` the table needs beyond its snapshot; None if it needs none."""
    if snapshot is None or snapshot.replay_from <= lsn_range.lo:
        return lsn_range
    if snapshot.replay_from >= lsn_range.hi:
        return None
    return LsnRange(snapshot.replay_from, lsn_range.hi)


def chain_result(
    table: Table,
    lsn_range: LsnRange,
    ranges: Sequence[LsnRange],
    snapshot: SnapshotInfo | None,
    retired: Lsn | None = None,
) -> AssetCheckResult:
    """``lo`` continues the chain: the previous range ends at ``lo``, or ``lo`` is at or below
    the LSN the table's snapshot replays from, or the ranges before ``lo`` were retired
    (``sync.retain_ranges``) and ended at ``lo``."""
    before = [r for r in ranges if r.lo < lsn_range.lo]
    previous = before[-1] if before else None
    meta = {"lo": lsn_range.lo.hex, "previous_hi": previous.hi.hex if previous else "none"}
    continues = previous is not None and previous.hi == lsn_range.lo
    if previous is None and retired is not None:
        meta["retired_through"] = retired.hex
        continues = lsn_range.lo == retired
    if snapshot is None:
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=CHAIN,
            passed=False,
            severity=AssetCheckSeverity.WARN,
            description="the table has no snapshot yet: materialize its 'snapshot' partition",
            metadata=meta,
        )
    meta["snapshot_replay_from"] = snapshot.replay_from.hex
    if lsn_range.lo <= snapshot.replay_from or continues:
        return AssetCheckResult(
            asset_key=table.change_log_key, check_name=CHAIN, passed=True, metadata=meta
        )
    since = previous.hi if previous else retired or snapshot.replay_from
    why = (
        f"range {lsn_range.key} overlaps the previous range {previous.key}"
        if previous is not None and previous.hi > lsn_range.lo
        else f"the changes between {since.hex} and {lsn_range.lo.hex} are in no partition"
    )
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=CHAIN,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=f"{why}; the mirror will not apply this range. Delete the partition key and "
        "let the sync sensor plan the next range from the end of the chain.",
        metadata=meta,
    )


def unavailable_result(
    conn: DbapiConnection, table: Table, instance: CaptureInstance, lsn_range: LsnRange
) -> AssetCheckResult | None:
    """A failed coverage check if the range is not inside the validity interval before the read
    (cleanup already removed changes above ``lo``, or capture has not reached ``hi``)."""
    try:
        check_range_available(conn, instance.name, lsn_range)
    except LsnNotAvailable as exc:
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=COVERAGE,
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            description=f"{exc.message} Nothing was written for this range and the mirror is "
            "not touched. Re-snapshot the table (materialize its 'snapshot' partition) to "
            "continue without loss.",
            metadata={
                "lo_plus_1": lsn_range.first.hex,
                "hi": lsn_range.hi.hex,
                "min_lsn": exc.minimum.hex if exc.minimum else "unknown",
                "max_lsn": exc.maximum.hex if exc.maximum else "unknown",
                "capture_instance": instance.name,
            },
        )
    return None


def schema_change_result(
    found: SourceTable | None, table: Table, snapshot: SnapshotInfo | None, lsn_range: LsnRange
) -> AssetCheckResult | None:
    """A failed coverage check when a newer capture instance (a schema change) started inside
    or before the range while the table's snapshot was taken with an older one.

    The new instance's extra columns have no values for rows that did not change since, so
    the table is re-snapshotted with it (``sync.on_gap``) instead of mixing the two."""
    if snapshot is None or not snapshot.capture_instance:
        return None
    current = found.current_instance if found is not None else None
    if (
        current is None
        or current.name == snapshot.capture_instance
        or current.start_lsn is None
        or current.start_lsn > lsn_range.hi
    ):
        return None
    old = found.instance(snapshot.capture_instance) if found is not None else None
    added = sorted(set(current.column_names) - set(old.column_names if old else ()))
    dropped = sorted(set(old.column_names if old else ()) - set(current.column_names))
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=f"schema change: capture instance {current.name} (from "
        f"{current.start_lsn.hex}) replaced {snapshot.capture_instance}"
        + (f"; columns added: {', '.join(added)}" if added else "")
        + (f"; columns dropped: {', '.join(dropped)}" if dropped else "")
        + ". Nothing was written for this range; the table is re-snapshotted with the new "
        "instance (sync.on_gap = resnapshot) and its mirror rebuilt with the new columns.",
        metadata={
            "previous_instance": snapshot.capture_instance,
            "new_instance": current.name,
            "new_instance_start_lsn": current.start_lsn.hex,
            "columns_added": ", ".join(added) or "none",
            "columns_dropped": ", ".join(dropped) or "none",
        },
    )


def coverage_result(table: Table, properties: dict[str, Any]) -> AssetCheckResult:
    coverage = properties.get("coverage")
    if coverage is None:  # the snapshot starts the coverage of the chain
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=COVERAGE,
            passed=True,
            description="snapshot: the chain starts here",
            metadata={
                "replay_from": properties["replay_from"],
                "snapshot_lsn": properties["snapshot_lsn"],
            },
        )
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=bool(coverage["ok"]),
        severity=AssetCheckSeverity.ERROR,
        description=(
            "the range was read inside the validity interval"
            if coverage["ok"]
            else f"{coverage['reason']}. The mirror is not touched. Re-snapshot the table "
            "(materialize its 'snapshot' partition) to continue without loss."
        ),
        metadata={
            "lo_plus_1": properties["lo"],
            "hi": properties["hi"],
            "min_lsn_after_read": coverage["min_lsn"],
            "max_lsn_after_read": coverage["max_lsn"],
        },
    )


def build_change_logs(source: Source, partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    """The change-log multi-asset of ``source`` (one output per captured table)."""
    by_key = {t.change_log_key: t for t in source.tables}
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
        for t in source.tables
    }
    checks = [
        spec
        for t in source.tables
        for spec in (
            AssetCheckSpec(
                COVERAGE,
                asset=t.change_log_key,
                blocking=True,
                description="The range was read while it lay inside the capture instance's "
                "validity interval (min LSN <= lo + 1 after the read, hi <= max LSN).",
            ),
            AssetCheckSpec(
                CHAIN,
                asset=t.change_log_key,
                blocking=True,
                description="The range continues the chain: lo is the previous range's hi, or "
                "at or below the table's snapshot LSN.",
            ),
        )
    ]

    @multi_asset(
        name=f"{source.name}_change_logs",
        outs=outs,
        check_specs=checks,
        can_subset=True,
        partitions_def=partitions,
        deps=[t.source_key for t in source.tables],
        internal_asset_deps={
            t.change_log_key.to_python_identifier(): {t.source_key} for t in source.tables
        },
        required_resource_keys={"pyspark"},
    )
    def change_logs(context: AssetExecutionContext) -> Iterator[Output | AssetCheckResult]:
        try:
            yield from events(context)
        except SqlServerError as exc:
            # unreachable, login refused, connection lost...: the message and what to do, once
            raise Failure(
                description=f"source {source.name}: {exc}",
                metadata={"source_error": type(exc).__name__},
                allow_retries=True,
            ) from None

    def events(context: AssetExecutionContext) -> Iterator[Output | AssetCheckResult]:
        spark = context.resources.pyspark.spark_session
        lsn_range = parse_partition(context.partition_key)
        selected = [by_key[k] for k in context.selected_asset_keys if k in by_key]
        # the keys back to this range's start (its predecessor), not all of them
        ranges = (
            recent_ranges(context.instance, partitions.name, reach=lsn_range.lo)
            if lsn_range is not None
            else []
        )
        retired = retired_through(context.instance, partitions.name)
        wanted = context.selected_asset_check_keys
        conn = source.connect()
        try:
            catalog = discover(conn)  # once per run: capture instances of every table
            for table in selected:
                found = catalog.get((table.schema, table.name))
                if lsn_range is None:
                    reason = context.run.tags.get(RESNAPSHOT_TAG)
                    instance = _instance_for(found, table, None)
                    stored = _snapshot_output(spark, source, table, instance, reason)
                else:
                    snapshot = snapshot_info(source, table)
                    read_range = effective_range(lsn_range, snapshot)
                    instance = _instance_for(found, table, (read_range or lsn_range).first)
                    refused = schema_change_result(found, table, snapshot, lsn_range)
                    if refused is None and read_range is not None:
                        refused = unavailable_result(conn, table, instance, read_range)
                    path = table.change_log_key.path
                    if refused is not None:
                        # Nothing is written: the blocking check fails and the mirrors wait;
                        # the gap tells the sensor to re-snapshot (sync.on_gap).
                        context.log.error(refused.description or "range not available")
                        source.store.mark_gap(
                            path,
                            context.partition_key,
                            {
                                "reason": refused.description,
                                "snapshot_version": snapshot.version if snapshot else None,
                                "run_id": context.run.run_id,
                            },
                        )
                        chained = chain_result(table, lsn_range, ranges, snapshot, retired)
                        results = [refused, chained]
                        yield from (
                            r for r in results if AssetCheckKey(r.asset_key, r.check_name) in wanted
                        )
                        continue
                    source.store.clear_gap(path, context.partition_key)
                    stored = _range_output(
                        spark, source, table, conn, lsn_range, instance, read_range
                    )
                yield Output(stored, output_name=table.change_log_key.to_python_identifier())
                # The IO manager has published the partition by now; check what it wrote.
                properties = source.store.properties(
                    table.change_log_key.path, context.partition_key
                )
                results = [coverage_result(table, properties or {})]
                if lsn_range is None:
                    results.append(
                        AssetCheckResult(
                            asset_key=table.change_log_key,
                            check_name=CHAIN,
                            passed=True,
                            description="snapshot: the chain of this table starts here",
                        )
                    )
                else:
                    results.append(
                        chain_result(
                            table, lsn_range, ranges, snapshot_info(source, table), retired
                        )
                    )
                yield from (
                    r for r in results if AssetCheckKey(r.asset_key, r.check_name) in wanted
                )
        finally:
            conn.close()

    return change_logs
