"""The range lane of the sync sensor (:mod:`.sync_sensor`): the next range and the tables that
run it, the tables behind (a failed run, a gap) caught up first, the oldest ranges retired, and
the next range asked for while the previous one is still in flight."""

from __future__ import annotations

import itertools
from dataclasses import replace

from dagster import (
    DagsterInstance,
    DynamicPartitionsDefinition,
)

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import committed_before, discover, get_max_lsn, plan_next_range
from cdc_assets.sqlserver.changed_tables import changed_instances, established_instances
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.errors import SqlServerError

from .mirror import mirror_position
from .sensor_requests import Tick, run_request, skip, skip_tick
from .sync.chain import (
    PAGE,
    RangeReader,
    SnapshotInfo,
    chain_end,
    range_partitions,
    recent_ranges,
)
from .sync.change_log_state import recorded_gap
from .sync.names import (
    CATCH_UP_TAG,
    PARTITION_RUN_TAG,
    RESNAPSHOT_TAG,
    SNAPSHOT_PARTITION,
)
from .sync.quiet_ranges import quiet_instance
from .sync.retry_waits import table_wait, table_waits, waiting_text
from .sync.runs_in_flight import RANGE_RUNS_IN_FLIGHT, InFlight
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync, now


def cleanup_gaps(
    source: Source, last: LsnRange, snapshots: dict[CapturedTable, SnapshotInfo | None]
) -> dict:
    """Tables whose change log of ``last`` could not be written because cleanup removed changes
    it needs, and that have not been re-snapshotted since: table -> the recorded reason."""
    found = {}
    for table, snap in snapshots.items():
        recorded = recorded_gap(source, table, last.key)
        if recorded is None or source.store.is_published(table.change_log_key.path, last.key):
            continue
        if snap is not None and recorded.snapshot_version != snap.version:
            continue  # re-snapshotted since: the rerun reads only what the new snapshot needs
        found[table] = str(recorded.reason or "changes were removed by cleanup")
    return found


def mirror_complete(
    source: Source, sync: SourceSync, table: CapturedTable, last: LsnRange, snap: SnapshotInfo
) -> bool:
    """Nothing of the chain up to ``last`` is left to do for ``table``'s mirror: it is there
    (moved by a merge or recorded quiet), or — its snapshot is consistent only after ``last`` —
    its change log holds ``last``."""
    if snap.snapshot_lsn > last.hi:  # the mirror waits for a range reaching its snapshot
        return source.store.is_published(table.change_log_key.path, last.key)
    return sync[table].mirror_reached(last.hi)


def range_complete(
    source: Source, sync: SourceSync, table: CapturedTable, last: LsnRange, snap: SnapshotInfo
) -> bool:
    """:func:`mirror_complete`, and the table's history, where it has one, is there too. The
    ranges are retired only when every table completed the newest, so those a history still
    needs stay, as those a mirror needs do."""
    if not mirror_complete(source, sync, table, last, snap):
        return False
    if snap.snapshot_lsn > last.hi or not source.has_history(table):
        return True
    return sync[table].history_reached(last.hi)


def mirrors_wait_for_snapshot(
    sync: SourceSync, snapshots: dict[CapturedTable, SnapshotInfo | None], maximum: Lsn
) -> bool:
    """Some mirror is missing or behind its table's snapshot, and capture has passed it."""
    waiting = []
    for table, snap in snapshots.items():
        if snap is None:
            continue
        row = sync[table]
        if not row.mirror_built or row.mirror_at is None or row.mirror_at < snap.snapshot_lsn:
            waiting.append(snap.snapshot_lsn)
    return bool(waiting) and maximum >= max(waiting)


def tables_to_run(
    conn: DbapiConnection,
    sync: SourceSync,
    tables: list[CapturedTable],
    lsn_range: LsnRange,
    *,
    ahead: bool = False,
) -> list[CapturedTable]:
    """The tables a new range's run works on: those with change rows in it (one statement per
    200 capture instances counts them), those whose mirror must be built or whose capture
    instance changed. The run records the range for the others, quiet, in one write
    (:mod:`.sync.quiet_ranges`). When every table is quiet, the first one runs: the chain moves on.
    ``ahead``: the run of the range before is still in flight, so a mirror not yet at the
    range's start is not a reason to run the table (it will be, or is caught up later)."""
    catalog, _ = sync.source.config.columns.apply_all(discover(conn))  # a misfit: runs, fails
    counted = {}
    run = set()
    for table in tables:
        found = catalog.get((table.schema, table.name))
        instance = quiet_instance(found, sync[table], lsn_range, ahead=ahead)
        if instance is None:
            run.add(table)
        else:
            counted[table] = instance
    if counted:
        names = sorted({i.name for i in counted.values()})
        counts = changed_instances(conn, names, lsn_range, among=established_instances(catalog))
        run.update(t for t, i in counted.items() if counts[i.name] > 0)
    return [t for t in tables if t in run] or tables[:1]


def to_retire(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    conn: DbapiConnection,
    last: LsnRange,
) -> tuple[LsnRange, ...]:
    """The oldest range partitions past ``sync.retain_ranges`` (at most a page of them), in
    order. Called once every mirror and history has applied ``last`` (the chain's newest
    range), so every older range is applied by every mirror and history that needs it; ``last``
    itself is always kept, so the chain's end stays in the keys. Reads the oldest page of keys,
    plus the newest ``count`` keys when the retention is a count; sends two queries when it is
    a duration."""
    count, seconds = source.config.sync.retention()
    oldest = instance.get_paginated_dynamic_partitions(partitions.name, limit=PAGE, ascending=True)
    candidates = [r for r in range_partitions(oldest.results) if r.hi <= last.lo]
    if not candidates:
        return ()
    if count is not None:
        kept = instance.get_paginated_dynamic_partitions(
            partitions.name, limit=count, ascending=False
        )
        newest = range_partitions(kept.results)
        if not kept.has_more or not newest:
            return ()
        bound = min(r.lo for r in newest)
    else:
        cutoff = committed_before(conn, seconds or 0.0)
        if cutoff is None:
            return ()
        bound = cutoff
    return tuple(itertools.takewhile(lambda r: r.hi <= bound, candidates))


def next_range_of(
    ranges: RangeReader,
    source: Source,
    table: CapturedTable,
    snap: SnapshotInfo,
    last: LsnRange,
    sync: SourceSync,
) -> LsnRange:
    """The range ``table`` needs next: the first after the LSN its mirror is at (its snapshot's
    replay LSN when the mirror is not built from that snapshot), which is where it stopped."""
    position = mirror_position(source, table, sync)
    at = snap.replay_from
    if position is not None and position.built_from(snap.version):
        assert position.lsn is not None
        at = max(at, position.lsn)
    for r in ranges(at):
        if r.hi > at and r.hi >= snap.snapshot_lsn:
            return r
    return last


def catch_up(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    behind: list[CapturedTable],
    snapshots: dict[CapturedTable, SnapshotInfo],
    last: LsnRange,
    sync: SourceSync,
    histories: frozenset[CapturedTable] = frozenset(),
) -> tuple[Tick | None, str]:
    """What to do about the tables that have not completed the newest range: re-snapshot those
    with a gap (``sync.on_gap``), else run the range each needs next, for those tables only,
    once their own pause after a failure is over (:mod:`.sync.table_failures`; ``histories``:
    those whose history alone is behind, which wait for their history's pause). (None, why):
    they wait, and the others keep syncing (``why`` goes into the tick's skip reason). When
    every table's mirror is behind and none failed on its own (the run failed as a whole: the
    source unreachable, a killed run), nothing else can go on: the newest range runs again."""
    whole = len(set(behind) - histories) == len(snapshots)
    ranges = RangeReader(instance, partitions.name)  # one read for every table behind
    needs = {t: next_range_of(ranges, source, t, snapshots[t], last, sync) for t in behind}
    gaps = {
        t: reason
        for t, r in needs.items()
        if (reason := cleanup_gaps(source, r, {t: snapshots[t]}).get(t)) is not None
    }
    if gaps:
        names = ", ".join(t.qualified_name for t in gaps)
        first = next(iter(gaps))
        wait = (
            f"range {needs[first].key} cannot be read for {names}: cleanup removed changes it "
            "needs (sync.on_gap = fail). Materialize the 'snapshot' partition of those tables "
            "to continue."
        )
        if source.config.sync.on_gap == "fail":
            # those tables wait for a person; the others keep syncing
            return (skip_tick(wait) if whole else None), wait
        reason = f"re-snapshot: range {needs[first].key} could not be read ({gaps[first]})"
        request = run_request(
            instance, source, SNAPSHOT_PARTITION, list(gaps), {RESNAPSHOT_TAG: reason[:1000]}
        )
        return Tick((request,), None, None), ""
    moment = now()
    waits = table_waits(source, sync, [t for t in behind if t not in histories], moment)
    waits.update(table_waits(source, sync, histories, moment, history=True))
    ready = [t for t in behind if t not in waits]
    if not ready:
        why = waiting_text(source, sync, waits)
        return (skip_tick(why) if whole else None), why
    if whole and not waits:
        # the newest range again, for the tables that changed in it (the run records the
        # others quiet, as the failed run would have)
        tables: list[CapturedTable] | None = None
        try:
            conn = source.connect()
            try:
                tables = tables_to_run(conn, sync, list(snapshots), last)
            finally:
                conn.close()
        except SqlServerError:
            pass  # the source still down: every table, and the run says why
        request = run_request(instance, source, last.key, tables, mirrors=tables is not None)
        return Tick((request,), None, None), ""
    target = min((needs[t] for t in ready), key=lambda r: r.lo)
    tables = [t for t in ready if needs[t] == target]
    request = run_request(
        instance, source, target.key, tables, {CATCH_UP_TAG: "true"}, mirrors=True
    )
    return Tick((request,), None, None), ""


def range_lane(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    sync: SourceSync,
    flight: InFlight,
    last_added: float | None,
) -> Tick:
    """The next range run of the tables that have a snapshot and no snapshot run in flight.
    While a range run is in flight, the next range's run may be asked for already
    (:func:`range_ahead`)."""
    if flight.range_runs:
        return range_ahead(instance, source, partitions, sync, flight)
    snapshots = {
        t: snap
        for t in source.tables
        if t not in flight.busy and (snap := sync[t].snapshot) is not None
    }
    if not snapshots:
        return skip_tick("no table has a snapshot yet")

    # the chain's end from the newest keys only: a tick costs the same at 10 or 100k partitions
    ranges = recent_ranges(instance, partitions.name)
    end = chain_end(ranges)
    behind: list[CapturedTable] = []
    histories: frozenset[CapturedTable] = frozenset()
    waiting = ""  # why tables behind wait: said in a skip reason
    if end is not None:
        last = ranges[-1]
        behind = [t for t, s in snapshots.items() if not range_complete(source, sync, t, last, s)]
        # a table whose history alone is behind: its mirror goes on with the next ranges
        histories = frozenset(
            t for t in behind if mirror_complete(source, sync, t, last, snapshots[t])
        )
        if behind:
            decided, waiting = catch_up(
                instance, source, partitions, behind, snapshots, last, sync, histories
            )
            if decided is not None:
                return decided
            # the tables behind wait for their retry; the others keep syncing
        start = end
    else:
        start = min(s.replay_from for s in snapshots.values())

    conn = source.connect()
    try:
        maximum = get_max_lsn(conn)  # the one query every tick sends
        if maximum <= start:
            return skip(waiting, f"max LSN {maximum.hex} has not moved past {start.hex}")
        if end is None:
            needed = max(s.snapshot_lsn for s in snapshots.values())
            if maximum < needed:
                return skip_tick(
                    f"waiting for capture to reach the snapshot LSN {needed.hex} "
                    f"(max LSN {maximum.hex})"
                )
        interval = source.config.sync.min_range_interval_seconds
        moment = now()
        if interval and last_added is not None and moment - last_added < interval:
            return skip(waiting, f"the previous range was added less than {interval} s ago")
        next_range = plan_next_range(
            conn, start, source.config.sync.max_transactions_per_range, maximum=maximum
        )
        retired: tuple[LsnRange, ...] = ()
        # retire once per range added, and never while a table is behind: it needs those ranges
        if next_range is not None and end is not None and not behind:
            retired = to_retire(instance, source, partitions, conn, ranges[-1])
        if next_range is None and mirrors_wait_for_snapshot(sync, snapshots, maximum):
            # No transaction since, but capture has passed the snapshots that mirrors wait for
            # (a first snapshot or a re-snapshot): a range without changes brings them up.
            next_range = LsnRange(start, maximum)
        if next_range is None:
            return skip(waiting, f"no transaction was captured after {start.hex}")
        healthy = [t for t in snapshots if t not in behind or t in histories]
        tables = tables_to_run(conn, sync, healthy, next_range)
    finally:
        conn.close()
    # the histories waiting after a failure stay out of the run (a catch-up run brings them up)
    request = run_request(
        instance, source, next_range.key, tables, mirrors=True, without_histories=histories
    )
    return Tick((request,), next_range.key, None, retired)


def _behind_before(
    source: Source, sync: SourceSync, tables: list[CapturedTable], ranges: list[LsnRange]
) -> list[CapturedTable]:
    """Those of ``tables`` that have not completed the range before the chain's last one (the
    run in flight brings the others to the chain's end)."""
    if len(ranges) < 2:
        return []
    previous = ranges[-2]
    return [
        t
        for t in tables
        if (snap := sync[t].snapshot) is not None
        and not mirror_complete(source, sync, t, previous, snap)
    ]


def range_ahead(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    sync: SourceSync,
    flight: InFlight,
) -> Tick:
    """The next range's run while the run of the chain's last range is still in flight: its
    fixed costs (queue, process start, code location, Spark session) pass while that run
    works, and its steps wait for it (:mod:`.sync.range_order`), so every table applies its ranges
    in order. Its tables are those that changed in the range (and those whose mirror must be
    built), whatever the run in flight leaves them at; what is not done then (a table the run
    in flight failed) is caught up once nothing is in flight."""
    newest = flight.range_runs[0]
    in_progress = (
        f"run {newest.run_id} ({newest.tags.get(PARTITION_RUN_TAG, '?')}) of {source.name} is "
        "in progress"
    )
    blocked = Tick((), None, in_progress, blocked_by=newest.run_id)
    if len(flight.range_runs) >= RANGE_RUNS_IN_FLIGHT:  # the oldest's end frees a place
        return replace(blocked, blocked_by=flight.range_runs[-1].run_id)
    ranges = recent_ranges(instance, partitions.name)
    end = chain_end(ranges)
    if end is None or newest.tags.get(PARTITION_RUN_TAG) != ranges[-1].key:
        return blocked  # a first range, a catch-up or a rerun: nothing runs ahead of it
    moment = now()
    # A table that failed on its own (its change log or mirror stays before the range) would fail
    # again ahead: it is left out, and once its pause is over nothing more runs ahead, so its
    # catch-up (or re-snapshot, for a gap) comes as soon as the runs in flight end, not at the
    # first lull in the workload (under steady writes there is none).
    failed = [t for t in source.tables if t not in flight.busy and sync[t].failures > 0]
    due = [t for t in failed if table_wait(source, sync[t], moment) is None]
    if due:
        names = ", ".join(t.qualified_name for t in due[:5]) + (" ..." if len(due) > 5 else "")
        reason = (
            f"{in_progress}; {names} failed and may be tried again: its catch-up comes when the "
            "range runs in flight end, before any range runs ahead"
        )
        return replace(blocked, skip_reason=reason)
    tables = [
        t
        for t in source.tables
        if t not in flight.busy and t not in failed and sync[t].snapshot is not None
    ]
    # Likewise a table behind the range before the one in flight (re-snapshotted meanwhile, or
    # waiting for its re-snapshot after a schema change): its mirror would refuse the range
    # ahead (it never skips one), so its catch-up comes first.
    behind = _behind_before(source, sync, tables, ranges)
    if behind:
        names = ", ".join(t.qualified_name for t in behind[:5])
        reason = (
            f"{in_progress}; {names}{' ...' if len(behind) > 5 else ''} not at "
            f"{ranges[-2].hi.hex} yet: its catch-up comes when the range runs in flight end, "
            "before any range runs ahead"
        )
        return replace(blocked, skip_reason=reason)
    if not tables:
        return blocked  # every table is busy (a snapshot) or waits after its failure
    conn = source.connect()
    try:
        maximum = get_max_lsn(conn)
        if maximum <= end:
            reason = f"{in_progress}; max LSN {maximum.hex} has not moved past {end.hex}"
            return replace(blocked, skip_reason=reason)
        next_range = plan_next_range(
            conn, end, source.config.sync.max_transactions_per_range, maximum=maximum
        )
        if next_range is None:
            reason = f"{in_progress}; no transaction was captured after {end.hex}"
            return replace(blocked, skip_reason=reason)
        tables = tables_to_run(conn, sync, tables, next_range, ahead=True)
    finally:
        conn.close()
    waiting = table_waits(source, sync, tables, moment, history=True)  # histories after a failure
    request = run_request(
        instance, source, next_range.key, tables, mirrors=True, without_histories=set(waiting)
    )
    return Tick((request,), next_range.key, None)
