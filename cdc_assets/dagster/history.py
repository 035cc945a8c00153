"""``history/<source>/<schema>/<table>_history``: each table's versions (SCD type 2).

For the tables the source's ``history`` settings name, a history beside the mirror, on the same
partitions and in the same sync runs: materializing range ``(lo, hi]`` brings every selected
history to ``hi``, applying the ranges it has not applied yet (usually just this one) in one
MERGE (:mod:`cdc_assets.spark.history_store`). Like the mirror, a history is built from its
table's snapshot by the first range run at or after the snapshot LSN (the ``snapshot`` run
writes the change log; the state at the snapshot LSN needs the changes up to it, which a
lock-free snapshot takes from the ranges): its versions open at the snapshot LSN. A new snapshot
of the table (a re-snapshot) closes, at its LSN, the versions of rows that vanished or differ and
opens the rows that differ: the history before it stays. Each commit records the LSN reached and
the snapshot it is built on, so a range already applied is never applied twice.

A history never applies a range that failed its coverage check, nor skips one: the table's
history stays where it was with a message, the other tables' histories apply the range, and the
step fails at the end naming those it left.
"""

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    Output,
    multi_asset,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import START_LSN, Lsn, LsnRange
from cdc_assets.spark import history_driver, history_store, sqlserver_source
from cdc_assets.spark.change_log_properties import range_of
from cdc_assets.spark.mirror_merge import rows_after_keyed_changes, rows_after_multiset_changes
from cdc_assets.spark.session import use_in_this_thread
from cdc_assets.sqlserver.lsn_queries import commit_time_at_or_before

from .sync.chain import ChainGap, RangeReader, SnapshotInfo, ranges_covering
from .sync.change_log_state import snapshot_info
from .sync.io_manager import Written, write_output
from .sync.names import SNAPSHOT_PARTITION
from .sync.partitions import parse_partition
from .sync.range_order import wait_for_earlier_ranges
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync
from .sync.table_names import register_table
from .sync.table_pool import LogLine, pooled_events
from .sync.table_steps import after_change_logs, current_table_out, step_name, table_groups


def history_position(source: Source, table: CapturedTable) -> history_store.HistoryPosition | None:
    """Where the table's history is (its last commit's ``userMetadata``); None: no history."""
    return history_store.position_of(source.store.properties(table.history_key.path, None))


def build_histories(
    source: Source, partitions: DynamicPartitionsDefinition
) -> list[AssetsDefinition]:
    """The history multi-assets of ``source`` (none when its settings name no table): one output
    per table with a history, one step per group of tables, each after their change logs."""
    tables = list(source.history_tables)
    if not tables:
        return []
    groups = table_groups(tables)
    return [_history_step(source, partitions, g, i, len(groups)) for i, g in enumerate(groups)]


def _tracked(source: Source, table: CapturedTable) -> tuple[str, ...] | None:
    """The table's ``track_history_columns`` (None: every change makes a version); a
    :class:`Failure` naming a column the table does not have."""
    tracked = source.config.history.tracked_columns(table.schema, table.name)
    if tracked is None:
        return None
    columns = list(table.instance.column_names)
    unknown = [c for c in tracked if c not in columns]
    if unknown:
        raise Failure(
            f"{table.qualified_name}: history.track_history_columns names {unknown}, which the "
            f"table does not have (its columns: {', '.join(columns)}); fix the source's config."
        )
    return tracked


def _state_at_snapshot(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    snapshot: SnapshotInfo,
    ranges: Callable[[Lsn], Sequence[LsnRange]],
) -> DataFrame:
    """The table as of its snapshot LSN: the snapshot's rows with the changes
    (``replay_from``, ``snapshot_lsn``] applied (none for an exact snapshot)."""
    store, path = source.store, table.change_log_key.path
    base = sqlserver_source.drop_snapshot_columns(store.read(spark, path, SNAPSHOT_PARTITION))
    start, at = snapshot.replay_from, snapshot.snapshot_lsn
    if at <= start:
        return base
    ends = [r.hi for r in ranges(start) if r.hi >= at]
    if not ends:
        raise Failure(
            f"{table.qualified_name}: no range reaches its snapshot LSN {at.hex} yet; a later "
            "range builds its history."
        )
    needed = ranges_covering(ranges(start), start, min(ends))
    rows, holding = _change_rows(source, table, needed, snapshot)
    if not rows:
        return base
    changes = store.read_partitions(spark, path, [r.key for r in holding])
    changes = changes.where(F.col(f"`{START_LSN}`") <= F.lit(bytearray(at.raw)))
    keys = list(table.instance.key_columns)
    if keys:
        return rows_after_keyed_changes(base, changes, key_columns=keys, snapshot_lsn=start.raw)
    return rows_after_multiset_changes(base, changes, snapshot_lsn=start.raw)


def _change_rows(
    source: Source, table: CapturedTable, needed: list[LsnRange], snapshot: SnapshotInfo
) -> tuple[int, list[LsnRange]]:
    """How many change rows ``needed`` holds for the table and the ranges that hold some,
    after checking each range is written and covered, or was quiet for the table: a range
    without a partition in the change log that the table's mirror has passed, built on the
    same snapshot (the run's change-log step proved it quiet and moved the mirror on in the
    sync state, :mod:`.quiet_ranges`)."""
    path = table.change_log_key.path
    row = SourceSync.load(source, fill=False).tables.get(table)
    passed = (
        row.mirror_at
        if row is not None and row.mirror_version == snapshot.version and row.mirror_at
        else None
    )
    rows, holding = 0, []
    for lsn_range in needed:
        found = range_of(source.store.properties(path, lsn_range.key))
        if found is None:
            if passed is not None and passed >= lsn_range.hi:
                continue  # quiet for the table
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} has not been materialized for "
                f"{table.change_log_key.to_user_string()}; materialize that partition first (the "
                "history never skips a range)."
            )
        if found.coverage is None or not found.coverage.ok:
            reason = (found.coverage and found.coverage.reason) or "no coverage recorded"
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} failed its coverage check "
                f"({reason}); the history is left as it is. Re-snapshot the table to continue."
            )
        count = found.rows if found.rows is not None else 1  # unknown: read the range
        rows += count
        if count:
            holding.append(lsn_range)
    return rows, holding


def _rebase_time(source: Source, at: Lsn) -> dt.datetime | None:
    conn = source.connect()
    try:
        return commit_time_at_or_before(conn, at)
    finally:
        conn.close()


def plan_history(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    target: Lsn,
    ranges: Callable[[Lsn], Sequence[LsnRange]],
) -> tuple[history_driver.HistoryWrite | None, str, dict[str, Any]]:
    """What brings ``table``'s history to ``target``: the write (None when there is nothing to
    commit), the reason when no range is applied, and what is done, for its metadata."""
    snapshot = snapshot_info(source, table)
    if snapshot is None:
        raise Failure(
            f"{table.qualified_name} has no snapshot yet: materialize the 'snapshot' partition of "
            f"{table.change_log_key.to_user_string()} first."
        )
    if target < snapshot.snapshot_lsn:
        return None, f"its snapshot is consistent from {snapshot.snapshot_lsn.hex} on", {}
    keys = tuple(table.instance.key_columns)
    position = history_position(source, table)
    done: dict[str, Any] = {"rebased_on_snapshot": False}
    rebase = None
    if position is None or (
        position.snapshot_version != snapshot.version and position.lsn < snapshot.snapshot_lsn
    ):
        # a new history, or a re-snapshot: versions open (and close) at the snapshot LSN
        at = snapshot.snapshot_lsn
        reached = history_store.HistoryPosition(at, snapshot.version)
        rebase = history_driver.HistoryRebase(
            _state_at_snapshot(spark, source, table, snapshot, ranges),
            at=at,
            at_time=_rebase_time(source, at),
            key_columns=keys,
            properties={"kind": "history", **history_store.position_properties(reached)},
            estimated_rows=snapshot.rows,
        )
        position = reached
        done["rebased_on_snapshot"] = True
    rebased = history_driver.HistoryWrite(rebase) if rebase is not None else None
    start = position.lsn
    if start >= target:
        return rebased, f"it is already at {start.hex}", done
    try:
        needed = ranges_covering(ranges(start), start, target)
    except ChainGap as exc:
        raise Failure(
            f"{table.qualified_name}: cannot bring its history to {target.hex}: {exc}"
        ) from None
    rows, holding = _change_rows(source, table, needed, snapshot)
    done.update(previous_lsn=start.hex, ranges_applied=len(needed), change_rows=rows)
    if not rows:
        # quiet ranges: nothing to record; the next range with changes applies from here
        return rebased, "its ranges are quiet", done
    reached = history_store.HistoryPosition(target, snapshot.version)
    changes = history_driver.HistoryChanges(
        tuple(table.change_log_key.path),
        tuple(r.key for r in holding),
        change_rows=rows,
        key_columns=keys,
        after_lsn=start.raw,
        properties={
            "kind": "history",
            **history_store.position_properties(reached),
            "previous_lsn": start.hex,
            "applied_ranges": [r.key for r in needed],
        },
        tracked=_tracked(source, table),
        history_rows=snapshot.rows,
    )
    return history_driver.HistoryWrite(rebase, changes), "", done


def _history_step(
    source: Source,
    partitions: DynamicPartitionsDefinition,
    tables: list[CapturedTable],
    index: int,
    groups: int,
) -> AssetsDefinition:
    """The history multi-asset of ``tables``, group ``index`` of ``source``'s history tables."""
    by_key = {t.history_key: t for t in tables}
    outs = {
        t: current_table_out(
            source,
            t,
            t.history_key,
            f"History (SCD type 2) of {t.qualified_name} in source '{source.name}': "
            "one version per key and transaction that changed it, valid from __start_lsn / "
            "__start_at to __end_lsn / __end_at (null while __is_current), applied range by "
            "range from the change log.",
        )
        for t in tables
    }

    @multi_asset(
        **after_change_logs(
            step_name(f"{source.name}_histories", index, groups),
            partitions,
            tables,
            outs,
            lambda t: t.history_key,
        )
    )
    def histories(context: AssetExecutionContext) -> Iterator[Output | AssetMaterialization]:
        lsn_range = parse_partition(context.partition_key)
        if lsn_range is None:
            context.log.info("histories move with range partitions; a range run builds them")
            return
        wait_for_earlier_ranges(context.instance, source.name, context.run, context.log.info)
        spark = context.resources.pyspark.spark_session
        ranges = RangeReader(context.instance, partitions.name)
        chosen = [by_key[k] for k in sorted(k for k in context.selected_asset_keys if k in by_key)]
        # a failed table's history stays where it was; the others go on
        failed = yield from pooled_events(
            context.log,
            chosen,
            lambda t: table_events(spark, t, lsn_range, ranges),
            source.config.sync.tables_in_parallel,
            lambda: use_in_this_thread(spark),
        )
        if failed:
            raise Failure(
                description=f"{len(failed)} of {len(chosen)} histories left where they were "
                "(the others applied the range): " + " | ".join(failed.values())
            )

    def table_events(
        spark: SparkSession,
        table: CapturedTable,
        lsn_range: LsnRange,
        ranges: Callable[[Lsn], Sequence[LsnRange]],
    ) -> Iterator[Output | AssetMaterialization | LogLine]:
        key = table.history_key
        write, why, done = plan_history(spark, source, table, lsn_range.hi, ranges)
        published = (
            write_output(spark, source.store, key.path, None, write) if write is not None else None
        )
        if done.get("rebased_on_snapshot") and published is not None:
            yield from register_table(spark, source, key)  # its columns may have changed
        if done.get("rebased_on_snapshot"):
            # its 'snapshot' partition shows as materialized (as a mirror's does), logged
            # before the range's output, so the latest materialization is the range's
            yield AssetMaterialization(
                asset_key=key,
                partition=SNAPSHOT_PARTITION,
                description=f"built on the table's snapshot by the run of range {lsn_range.key}",
                metadata={"applied_by_range": lsn_range.key},
            )
        if published is None or write is None or write.changes is None:
            yield LogLine("info", f"{key.to_user_string()} is left as it is: {why}")
            if done.get("rebased_on_snapshot"):
                yield AssetMaterialization(
                    asset_key=key,
                    partition=lsn_range.key,
                    description=f"built on its snapshot; {why}",
                    metadata={k: v for k, v in done.items() if v is not None},
                )
            return
        applied = published

        def metadata(p: dict[str, Any]) -> dict[str, Any]:
            return {
                "history_lsn": p[history_store.LSN],
                **{k: v for k, v in done.items() if v is not None},
                "versions_opened": applied.metrics.get("numTargetRowsInserted"),
                "versions_closed_or_updated": applied.metrics.get("numTargetRowsUpdated"),
            }

        yield Output(Written(published, metadata), output_name=key.to_python_identifier())

    return histories
