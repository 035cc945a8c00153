"""``mirror/<source>/<schema>/<table>``: the current state of each table, merged incrementally.

The mirrors share the source's partitions: materializing range ``(lo, hi]`` brings every selected
mirror to ``hi``, applying only the range partitions it has not applied yet (usually just this one)
to its current state — never a recomputation from all history. The state lives in one place per
mirror (``cdc_assets/layout: current``) with the LSN it is at, the snapshot it was built from,
and the ranges it applied. A new snapshot of the table rebuilds the mirror from it.

A mirror never applies a range that failed its coverage check, and never skips one: a missing,
unchecked or uncovered range leaves that mirror where it was with a message saying which and what
to do, while the other mirrors apply the range; the step then fails naming the mirrors it left.
"""

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetExecutionContext,
    AssetMaterialization,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    MetadataValue,
    Output,
    multi_asset,
)
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.records import MirrorPosition
from cdc_assets.spark import mirror_store, mirror_versions, spark_merges
from cdc_assets.spark.change_log_properties import range_of
from cdc_assets.spark.session import use_in_this_thread

from .sync.chain import (
    ChainGap,
    RangeReader,
    SnapshotInfo,
    ranges_covering,
)
from .sync.chain_end_check import ChainEndView, as_evaluation
from .sync.change_log_state import (
    AwaitsResnapshot,
    awaited_resnapshot,
    snapshot_info,
    snapshot_progress,
)
from .sync.io_manager import AssetWrite, Written, write_output
from .sync.metadata import (
    COLUMN_LINEAGE,
    column_lineage,
    mirror_freshness,
    text,
)
from .sync.names import SNAPSHOT_PARTITION
from .sync.partitions import parse_partition
from .sync.range_order import wait_for_earlier_ranges
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync, TableSync, describes, mirror_at, now, with_mirror
from .sync.table_failures import cleared, record_failures
from .sync.table_names import register_table
from .sync.table_pool import LogLine, pooled_events
from .sync.table_steps import after_change_logs, current_table_out, step_name, table_groups


def mirror_position(
    source: Source, table: CapturedTable, sync: SourceSync | None = None
) -> MirrorPosition | None:
    """Where the mirror is: what its last commit recorded, its ``lsn`` moved on by the quiet
    ranges the sync state recorded after that commit (``commit_lsn``: the commit's own), its
    rows from the sync state when the commit did not record them (a MERGE's row count is known
    only after its commit); ``sync``: the source's sync state when the caller has read it."""
    return _position(source.store.properties(table.mirror_key.path, None), source, table, sync)


def _position(
    committed: dict[str, Any] | None, source: Source, table: CapturedTable, sync: SourceSync | None
) -> MirrorPosition | None:
    position = mirror_versions.position_of(committed)
    if position is None:
        return None
    if sync is None:
        sync = SourceSync.load(source, fill=False)
    row = sync.tables.get(table)
    if describes(row, position) and row is not None and position.rows is None:
        position = replace(position, rows=row.mirror_rows)
    at, quiet = mirror_at(position, row)
    if quiet and at is not None:
        position = replace(position, lsn=at)
    return position


def mirror_state(
    source: Source, table: CapturedTable, sync: SourceSync | None = None
) -> dict[str, Any] | None:
    """The properties of the mirror's last commit with its position (:func:`mirror_position`)
    in them: its ``lsn`` moved on by quiet ranges (``committed_lsn``: the commit's own), its
    ``rows`` from the sync state when the commit did not record them."""
    committed = source.store.properties(table.mirror_key.path, None)
    position = _position(committed, source, table, sync)
    if not committed or position is None:
        return committed
    state = dict(committed)
    if "rows" not in state and position.rows is not None:
        state["rows"] = position.rows
    if position.lsn is not None and position.lsn != position.commit_lsn:
        state.update(lsn=position.lsn.hex, committed_lsn=committed["lsn"])
    return state


def mirror_lsn(source: Source, table: CapturedTable, sync: SourceSync | None = None) -> Lsn | None:
    position = mirror_position(source, table, sync)
    return position.lsn if position is not None else None


def _change_rows(
    source: Source, table: CapturedTable, needed: list[LsnRange], snapshot: SnapshotInfo
) -> int:
    """How many change rows ``needed`` holds (0: quiet ranges are applied without reading
    anything; a range whose count is unknown counts 1, to be read), after checking each range
    is written and covered (:class:`AwaitsResnapshot`: one was refused for a re-snapshot)."""
    path = table.change_log_key.path
    rows = 0
    for lsn_range in needed:
        properties = source.store.properties(path, lsn_range.key)
        found = range_of(properties)
        if properties is None:
            waiting = awaited_resnapshot(source, table, snapshot, lsn_range.key)
            if waiting is not None:
                raise waiting
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} has not been materialized for "
                f"{table.change_log_key.to_user_string()}; materialize that partition first (the "
                "mirror never skips a range)."
            )
        coverage = found.coverage if found is not None else None
        if coverage is None or not coverage.ok:
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} failed its coverage check "
                f"({(coverage and coverage.reason) or 'no coverage recorded'}); the mirror is "
                "left as it is. Re-snapshot the table to continue."
            )
        assert found is not None
        rows += found.rows if found.rows is not None else 1  # unknown: read the range
    return rows


def _as_of(source: Source, table: CapturedTable, applied: list[LsnRange]) -> dict[str, Any]:
    """The commit time the mirror is at (the last applied range's last commit) and the lag
    measured when that range was read."""
    for lsn_range in reversed(applied):
        found = range_of(source.store.properties(table.change_log_key.path, lsn_range.key))
        if found is not None and found.last_commit:
            return {
                "as_of_commit_time": found.last_commit,
                "lag_at_read_seconds": found.lag_seconds,
                "read_at": found.read_at,
            }
    return {}


def _lag_now(p: dict[str, Any]) -> float:
    """Seconds from the mirror's last commit to now: the lag when its range was read plus the
    time since (both from clocks of one side, so server and local clocks need not agree)."""
    if p.get("lag_at_read_seconds") is None:
        return 0.0
    since = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(p["read_at"])
    return round(float(p["lag_at_read_seconds"]) + since.total_seconds(), 3)


def _mirror_output(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    ranges: Callable[[Lsn], Sequence[LsnRange]],
    target: Lsn,
    snapshot: SnapshotInfo | None,
    position: MirrorPosition | None,
) -> tuple[AssetWrite | None, str]:
    """The new state of ``table``'s mirror at ``target``, or None and the reason to leave it
    (``snapshot``: the table's snapshot, ``position``: where the mirror is, both read by the
    caller)."""
    if snapshot is None:
        under_way = snapshot_progress(source, table)
        if under_way is not None:
            raise Failure(
                f"{table.qualified_name}: its snapshot is under way ({under_way.chunks_done} "
                f"chunks, {under_way.rows:,} rows committed, started {under_way.started_at}); "
                "the mirror stays as it is until it is complete. A snapshot run of the table "
                "resumes it (materialize the 'snapshot' partition of "
                f"{table.change_log_key.to_user_string()})."
            )
        raise Failure(
            f"{table.qualified_name} has no snapshot yet: materialize the 'snapshot' partition of "
            f"{table.change_log_key.to_user_string()} first."
        )
    if target < snapshot.snapshot_lsn:
        return None, (
            f"its snapshot is consistent from {snapshot.snapshot_lsn.hex} on, after this range's "
            f"end {target.hex}; a later range brings it up"
        )
    if position is not None and position.built_from(snapshot.version):
        assert position.lsn is not None
        start = position.lsn
        if start >= target:
            return None, f"it is already at {start.hex}"
        rebuilt = False
    else:
        start = snapshot.replay_from
        rebuilt = True
    try:
        needed = ranges_covering(ranges(start), start, target)
    except ChainGap as exc:
        raise Failure(
            f"{table.qualified_name}: cannot bring the mirror to {target.hex}: {exc}"
        ) from None
    try:
        rows = _change_rows(source, table, needed, snapshot)
    except AwaitsResnapshot as waiting:
        return None, str(waiting)
    changes = mirror_store.ChangeRanges(
        change_log=tuple(table.change_log_key.path),
        partitions=tuple(r.key for r in needed),
        rows=rows,
        key_columns=tuple(table.instance.key_columns),
        after=start.raw,
    )
    from_snapshot = (
        mirror_store.SnapshotPartition(SNAPSHOT_PARTITION, snapshot.rows) if rebuilt else None
    )
    before = position.rows if position is not None and not rebuilt else None
    as_of = _as_of(source, table, needed)
    reached = MirrorPosition(
        lsn=target,
        snapshot_version=snapshot.version,
        rows=None,  # the mirror store counts them
        commit_time=as_of.get("as_of_commit_time"),
        # a merge keeps the mirror's columns (a schema change comes with a new snapshot)
        columns=position.columns if not rebuilt and position is not None else None,
    )
    properties: dict[str, Any] = {
        **as_of,
        "kind": "mirror",
        **mirror_versions.position_properties(reached),
        "snapshot_lsn": snapshot.snapshot_lsn.hex,
        "replay_from": snapshot.replay_from.hex,
        "previous_lsn": start.hex,
        "applied_ranges": [r.key for r in needed],
        "rebuilt_from_snapshot": rebuilt,
    }

    # rebuild or merge, in the driver or by Spark: the mirror store chooses
    write = mirror_store.MirrorWrite(changes, properties, before, from_snapshot)

    def metadata(p: dict[str, Any]) -> dict[str, Any]:
        reached = mirror_versions.position_of(p)
        assert reached is not None and reached.lsn is not None
        return {
            "dagster/row_count": reached.rows,
            "mirror_lsn": reached.lsn.hex,
            "previous_lsn": p["previous_lsn"],
            "ranges_applied": len(p["applied_ranges"]),
            "rebuilt_from_snapshot": p["rebuilt_from_snapshot"],
            "as_of_commit_time": text(p.get("as_of_commit_time") or "(snapshot only)"),
            # no lag for a mirror that is only its snapshot: no range commit to measure it from
            **({"lag_seconds": MetadataValue.float(_lag_now(p))} if p.get("read_at") else {}),
            COLUMN_LINEAGE: column_lineage(list(reached.columns or ()), table.source_key),
        }

    return AssetWrite(write, metadata), ""


def build_mirrors(
    source: Source, partitions: DynamicPartitionsDefinition
) -> list[AssetsDefinition]:
    """The mirror multi-assets of ``source``: one output per captured table, one step per group
    of tables (:mod:`.sync.table_steps`), each after its group's change logs."""
    groups = table_groups(source.tables)
    return [_mirror_step(source, partitions, g, i, len(groups)) for i, g in enumerate(groups)]


def _mirror_step(
    source: Source,
    partitions: DynamicPartitionsDefinition,
    tables: list[CapturedTable],
    index: int,
    groups: int,
) -> AssetsDefinition:
    """The mirror multi-asset of ``tables``, group ``index`` of ``source``'s tables."""
    by_key = {t.mirror_key: t for t in tables}
    outs = {
        t: current_table_out(
            source,
            t,
            t.mirror_key,
            f"Current state of {t.qualified_name} in source '{source.name}' "
            + (
                f"(keyed by {', '.join(t.instance.key_columns)})"
                if t.instance.key_columns
                else "(no key: a multiset of rows)"
            )
            + ", merged incrementally from the change log; materializing range `<lo>-<hi>` "
            "brings it to hi.",
            freshness_policy=mirror_freshness(source.config),
        )
        for t in tables
    }

    @multi_asset(
        **after_change_logs(
            step_name(f"{source.name}_mirrors", index, groups),
            partitions,
            tables,
            outs,
            lambda t: t.mirror_key,
        )
    )
    def mirrors(
        context: AssetExecutionContext,
    ) -> Iterator[Output | AssetMaterialization | AssetCheckEvaluation]:
        lsn_range = parse_partition(context.partition_key)
        if lsn_range is None:
            context.log.info("mirrors move with range partitions; 'snapshot' has nothing to apply")
            return
        wait_for_earlier_ranges(context.instance, source.name, context.run, context.log.info)
        spark = context.resources.pyspark.spark_session
        # the range keys back to where a mirror is (usually one page), read once per run
        ranges = RangeReader(context.instance, partitions.name)

        sync = SourceSync.load(source)
        updates: dict[CapturedTable, TableSync] = {}
        tables = [by_key[k] for k in sorted(k for k in context.selected_asset_keys if k in by_key)]
        # One table never holds back the others: a failed table's mirror stays where it was (its
        # data and LSN are one commit), the others apply the range.
        failed = yield from pooled_events(
            context.log,
            tables,
            lambda t: table_events(context, spark, t, lsn_range, ranges, sync, updates),
            source.config.sync.tables_in_parallel,
            lambda: use_in_this_thread(spark),
        )
        # where the mirrors are now, for the sensor (after their commits: never ahead of them),
        # and the tables that failed, each retried on its own schedule (:mod:`.sync.table_failures`)
        rows = record_failures(context.instance, context.run.run_id, spark, sync, failed, updates)
        # at_chain_end of every mirror of the run, also when one failed (see .chain_end_check);
        # yielded, not logged: events logged with context.log_event reach Dagster only with the
        # step's next yield, and the Failure below would drop them. The chain and the runs as
        # they are now: the sensor may have added the next range while this run worked.
        view = ChainEndView.read(context.instance, source)
        for table in tables:
            row = rows.get(table, sync[table])
            yield as_evaluation(view.result(table.mirror_key, table, row.mirror_at, row), None)
        if failed:
            raise Failure(
                description=f"{len(failed)} of {len(context.selected_asset_keys)} mirrors left "
                "where they were (the others applied the range): " + " | ".join(failed.values())
            )

    def table_events(
        context: AssetExecutionContext,
        spark: SparkSession,
        table: CapturedTable,
        lsn_range: LsnRange,
        ranges: Callable[[Lsn], Sequence[LsnRange]],
        sync: SourceSync,
        updates: dict[CapturedTable, TableSync],
    ) -> Iterator[Output | AssetMaterialization | LogLine]:
        """One table's mirror brought to the range's end, in a worker thread: its events are
        yielded by the step, its new sync-state row goes into ``updates``."""
        key = table.mirror_key
        snapshot = snapshot_info(source, table)
        position = mirror_position(source, table, sync)
        row = replace(sync[table], snapshot=snapshot)
        from_snapshot = snapshot is not None and (
            position is None or position.snapshot_version != snapshot.version
        )
        output, why = _mirror_output(spark, source, table, ranges, lsn_range.hi, snapshot, position)
        if output is None:
            yield LogLine("info", f"{key.to_user_string()} is left as it is: {why}")
            if position is not None and position.lsn and position.snapshot_version:
                # what the mirror's own commit says, where the sync state lags behind it (a run
                # killed between the two): its rows are counted, as no MERGE metrics say them
                at, rows = position.lsn, position.rows
                commit_lsn = position.commit_lsn or position.lsn
                if rows is None:
                    rows = spark_merges.row_count(spark, source.store.location(key.path))
                moved = with_mirror(row, position.snapshot_version, commit_lsn, rows, None)
                updates[table] = cleared(replace(moved, mirror_at=max(at, commit_lsn)))
            return
        published = write_output(spark, source.store, key.path, None, output.write)
        reached = mirror_versions.position_of(published.properties)
        if published.committed:
            assert reached is not None and reached.snapshot_version is not None
            row = with_mirror(row, reached.snapshot_version, lsn_range.hi, reached.rows, now())
        else:  # quiet ranges only: the same commit, a new position
            row = replace(row, mirror_at=lsn_range.hi, reported_at=now())
        updates[table] = cleared(row)
        if from_snapshot and published.committed:  # (re)built: its columns may have changed
            yield from register_table(spark, source, key)
        if from_snapshot and snapshot is not None:
            # The mirror holds its table's snapshot from now on: its 'snapshot' partition
            # shows as materialized, not as missing for ever. Logged before the range's
            # output, so the mirror's latest materialization (what the UI shows) is the range.
            yield AssetMaterialization(
                asset_key=key,
                partition=SNAPSHOT_PARTITION,
                description=f"rebuilt from the snapshot at {snapshot.snapshot_lsn.hex} "
                f"by the run of range {context.partition_key}",
                metadata={
                    "snapshot_lsn": snapshot.snapshot_lsn.hex,
                    "applied_by_range": context.partition_key,
                },
            )
        yield Output(Written(published, output.metadata), output_name=key.to_python_identifier())

    return mirrors
