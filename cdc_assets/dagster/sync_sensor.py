"""Continuous sync: one sensor per source.

Each tick sends one cheap query to the source (``sys.fn_cdc_get_max_lsn()``), whatever the number
of tables, and more only when the max LSN moved past the end of the chain. A source has two
lanes of runs, which go side by side, so a long snapshot never holds back the ranges of the
other tables:

- **snapshots**: the tables without a snapshot (new, re-snapshotted, or still under way after a
  kill: the run resumes it) that no run works on get one run of the ``snapshot`` partition;
- **ranges**: one range run at a time, for the tables that have a snapshot and no run in flight.

Before either, a run of the source that failed as a whole (the source unreachable, a killed
process) a moment ago pauses the source. A run that failed for some tables only names them in its
tag and writes each one's failure into the sync state (:mod:`.table_failures`): those tables wait,
the pause doubling with each failure in a row up to ``sync.max_retry_pause``, and the others go
on. In the range lane, in order:

1. some tables have not completed the newest range (a run failed for them): if cleanup removed
   changes the range each needs next (a gap), re-snapshot those tables (``sync.on_gap:
   resnapshot``) or leave them for a person (``fail``); otherwise, once a table's pause is
   over, run the range it needs next (where its mirror stopped) for those tables only. While
   tables wait for their retry, the others go on to step 2. Only when every table is behind
   and none failed on its own (the run failed as a whole) does the newest range run again;
2. the max LSN moved → add the next range ``(end, hi]`` (at most ``max_transactions_per_range``
   transactions) and request one run that materializes it for every table that is not behind,
   change logs then mirrors. The first range after the snapshots is added even without
   transactions once capture has passed every snapshot LSN, so quiet tables get their mirrors.

The chain is read from the partition keys and the published data, never kept in the cursor, so a
restarted daemon continues exactly where the chain ends. Evaluations of one source's sensor hold
a lock in the Dagster instance while they decide and add the range (:mod:`.sensor_lock`; two
overlapping evaluations would otherwise add overlapping ranges), and every run request has the
run key ``<partition>#<runs so far>``, so evaluations that ask for the same run before it exists
get one run.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from dagster import (
    AssetCheckKey,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from cdc_assets.config import duration_seconds
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import committed_before, discover, get_max_lsn, plan_next_range
from cdc_assets.sqlserver.changed_tables import changed_instances, established_instances
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.errors import SqlServerError

from .chain import (
    PAGE,
    RangeReader,
    SnapshotInfo,
    chain_end,
    range_partitions,
    recent_ranges,
    retire,
)
from .change_log_state import recorded_gap
from .health_checks import CAPTURE_HEALTH
from .io_manager import is_source_level
from .mirror import mirror_position
from .names import (
    CATCH_UP_TAG,
    CHANGE_LOG_CHECKS,
    PARTITION_RUN_TAG,
    PARTITION_TAG,
    RANGE_LANE_TAG,
    RESNAPSHOT_TAG,
    SNAPSHOT_OF_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
    TABLES_TAG,
    sensor_name,
)
from .quiet_ranges import REPORT_EVERY_RANGE_UP_TO, quiet_instance
from .range_order import IN_FLIGHT
from .sensor_lock import sensor_lock
from .source import Source, Table
from .sync_state import SourceSync, now
from .table_failures import FAILED_TABLES_TAG, seconds_to_wait

FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]


@dataclass(frozen=True)
class Tick:
    """What one evaluation decided (also what the tests look at): at most one run of the
    ``snapshot`` partition (tables without a snapshot) and one range run."""

    run_requests: tuple[RunRequest, ...]
    new_partition: str | None
    skip_reason: str | None
    retired: tuple[LsnRange, ...] = ()  # oldest range partitions to delete (sync.retain_ranges)
    blocked_by: str | None = None  # the range run in flight that the range lane waits for

    @property
    def run_request(self) -> RunRequest | None:
        """The first run asked for (the snapshot's, when there are two)."""
        return self.run_requests[0] if self.run_requests else None


def _skip_tick(reason: str) -> Tick:
    return Tick((), None, reason)


# Range runs of a source in flight at once: one working, the next one starting (queue, process,
# code location, Spark session) and then waiting for it (:mod:`.range_order`).
RANGE_RUNS_IN_FLIGHT = 2


@dataclass(frozen=True)
class InFlight:
    """The source's runs that have not finished: the tables the snapshot runs among them work
    on, and the range runs (newest first; snapshot runs go beside them)."""

    busy: frozenset[Table]
    range_runs: tuple[DagsterRun, ...]
    snapshot_runs: tuple[DagsterRun, ...] = ()

    @classmethod
    def read(cls, instance: DagsterInstance, source: Source) -> InFlight:
        runs = instance.get_runs(
            filters=RunsFilter(tags={SOURCE_TAG: source.name}, statuses=IN_FLIGHT), limit=100
        )
        busy: set[Table] = set()
        ranged, snapshots = [], []
        for run in runs:
            if run.tags.get(PARTITION_RUN_TAG) == SNAPSHOT_PARTITION:
                busy |= _selected(source, run)
                snapshots.append(run)
            else:
                ranged.append(run)
        return cls(frozenset(busy), tuple(ranged), tuple(snapshots))

    def snapshots_text(self) -> str:
        """The snapshot runs in flight, for a skip reason ("" when none)."""
        if not self.snapshot_runs:
            return ""
        ids = ", ".join(run.run_id for run in self.snapshot_runs)
        tables = len(self.busy)
        return f"snapshot run(s) {ids} of {tables} table(s) in progress"

    def text(self) -> str:
        """Every run in flight, for a skip reason ("" when none)."""
        ranges = ", ".join(run.run_id for run in self.range_runs)
        parts = [self.snapshots_text(), f"range run(s) {ranges} in progress" if ranges else ""]
        return "; ".join(x for x in parts if x)


SNAPSHOT_OF_TABLES = 50  # snapshot runs of at most this many tables name them in a tag


def _selected(source: Source, run: DagsterRun) -> set[Table]:
    """The tables ``run`` works on: its asset selection, else the tables its tag names (a run
    executed in process records no selection), else every table of the job."""
    if run.asset_selection:
        keys = run.asset_selection
        return {t for t in source.tables if t.change_log_key in keys or t.mirror_key in keys}
    named = run.tags.get(SNAPSHOT_OF_TAG)
    if named:
        names = set(json.loads(named))
        return {t for t in source.tables if t.qualified_name in names}
    return set(source.tables)


def _request(
    instance: DagsterInstance,
    source: Source,
    partition: str,
    tables: list[Table] | None = None,
    extra_tags: dict[str, str] | None = None,
    *,
    mirrors: bool = False,
) -> RunRequest:
    """The run for ``partition``. Its run key is the partition and how many runs of it were
    already launched, so two evaluations that decide the same thing before either run exists
    (racing ticks) ask for one run: Dagster launches one run per run key of a sensor."""
    tags = {SOURCE_TAG: source.name, PARTITION_TAG: partition}
    attempt = instance.get_runs_count(filters=RunsFilter(tags=tags))
    tags[TABLES_TAG] = str(len(source.tables))
    if partition != SNAPSHOT_PARTITION:
        tags[RANGE_LANE_TAG] = source.name
    elif tables is not None and len(tables) <= SNAPSHOT_OF_TABLES:
        tags[SNAPSHOT_OF_TAG] = json.dumps(sorted(t.qualified_name for t in tables))
    selection = None
    checks = None
    if tables is not None:  # only these tables, with their checks (not the others)
        selection = [t.change_log_key for t in tables]
        checks = [
            AssetCheckKey(t.change_log_key, name) for t in tables for name in CHANGE_LOG_CHECKS
        ]
        if mirrors:  # a range: their mirrors too, and the checks a range run evaluates
            selection += [t.mirror_key for t in tables]
            selection += [t.history_key for t in tables if t in source.history_tables]
            # capture_health is one set of queries for the whole source: in a source whose
            # quiet tables are reported every range, theirs too (the UI shows a check passed
            # only when its latest result is from the run of the latest materialization)
            healthy = tables if len(source.tables) > REPORT_EVERY_RANGE_UP_TO else source.tables
            checks += [AssetCheckKey(t.change_log_key, CAPTURE_HEALTH) for t in healthy]
            # at_chain_end: reported by the mirrors step itself (:mod:`.chain_end_check`)
    return RunRequest(
        run_key=f"{partition}#{attempt}",
        partition_key=partition,
        asset_selection=selection,
        asset_check_keys=checks,
        tags={**tags, **(extra_tags or {})},
    )


def _gaps(source: Source, last: LsnRange, snapshots: dict[Table, SnapshotInfo | None]) -> dict:
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


def _retry_pause(source: Source) -> float:
    """The pause after a failed run: before the source is tried again after a run that failed
    as a whole, before a table is tried again after its first failure in a row."""
    return max(30.0, 6.0 * source.config.sync.sensor_interval_seconds)


def _table_waits(
    source: Source, sync: SourceSync, tables: Iterable[Table], moment: float
) -> dict[Table, float]:
    """Those of ``tables`` that failed on their own a moment ago: the seconds each still waits
    (the pause grows with each failure in a row, :mod:`.table_failures`)."""
    base = _retry_pause(source)
    bound = duration_seconds(source.config.sync.max_retry_pause)
    return {
        t: left
        for t in tables
        if (left := seconds_to_wait(sync[t], base, bound, moment)) is not None
    }


def _waiting_text(source: Source, sync: SourceSync, waits: Mapping[Table, float]) -> str:
    """What the tables in ``waits`` wait for, for a skip reason (the first few by name)."""
    shown = sorted(waits, key=lambda t: t.qualified_name)
    parts = [
        f"{t.qualified_name} (failed {sync[t].failures}x, next try in {waits[t]:.0f} s: "
        f"{(sync[t].failure or '')[:200]})"
        for t in shown[:3]
    ]
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    return "waiting after failures: " + "; ".join(parts) + more


def _recent_failure(instance: DagsterInstance, source: Source) -> str | None:
    """Why to wait before anything else runs: the source's latest finished run failed as a
    whole (the source unreachable, a killed process) only a moment ago. A run that failed for
    some tables only (they are named in its tag) pauses those tables alone (their sync state)."""
    records = instance.get_run_records(
        filters=RunsFilter(tags={SOURCE_TAG: source.name}, statuses=FINISHED), limit=1
    )
    if not records:
        return None
    record = records[0]
    run = record.dagster_run
    if run.status != DagsterRunStatus.FAILURE or FAILED_TABLES_TAG in run.tags:
        return None
    ended = record.end_time
    if ended is None:
        return None
    waited = dt.datetime.now(dt.UTC).timestamp() - ended
    pause = _retry_pause(source)
    if waited >= pause:
        return None
    return (
        f"run {run.run_id} ({run.tags.get(PARTITION_TAG, '?')}) failed {waited:.0f} s "
        f"ago; retrying after {pause:.0f} s"
    )


def _range_complete(
    source: Source, sync: SourceSync, table: Table, last: LsnRange, snap: SnapshotInfo
) -> bool:
    """Nothing of the chain up to ``last`` is left to do for ``table``: its mirror is there
    (moved by a merge or recorded quiet), or — its snapshot is consistent only after ``last`` —
    its change log holds ``last``."""
    if snap.snapshot_lsn > last.hi:  # the mirror waits for a range reaching its snapshot
        return source.store.is_published(table.change_log_key.path, last.key)
    return sync[table].mirror_reached(last.hi)


def _mirrors_wait_for_snapshot(
    sync: SourceSync, snapshots: dict[Table, SnapshotInfo | None], maximum: Lsn
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


def _tables_to_run(
    conn: DbapiConnection,
    sync: SourceSync,
    tables: list[Table],
    lsn_range: LsnRange,
    *,
    ahead: bool = False,
) -> list[Table]:
    """The tables a new range's run works on: those with change rows in it (one statement per
    200 capture instances counts them), those whose mirror must be built or whose capture
    instance changed. The run records the range for the others, quiet, in one write
    (:mod:`.quiet_ranges`). When every table is quiet, the first one runs: the chain moves on.
    ``ahead``: the run of the range before is still in flight, so a mirror not yet at the
    range's start is not a reason to run the table (it will be, or is caught up later)."""
    catalog = discover(conn)
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


def _to_retire(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    conn: DbapiConnection,
    last: LsnRange,
) -> tuple[LsnRange, ...]:
    """The oldest range partitions past ``sync.retain_ranges`` (at most a page of them), in
    order. Called once every mirror has applied ``last`` (the chain's newest range), so every
    older range is applied by every mirror that needs it; ``last`` itself is always kept, so the
    chain's end stays in the keys. Reads the oldest page of keys, plus the newest ``count`` keys
    when the retention is a count; sends two queries when it is a duration."""
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


def _next_range_of(
    ranges: RangeReader,
    source: Source,
    table: Table,
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


def _catch_up(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    behind: list[Table],
    snapshots: dict[Table, SnapshotInfo],
    last: LsnRange,
    sync: SourceSync,
) -> tuple[Tick | None, str]:
    """What to do about the tables that have not completed the newest range: re-snapshot those
    with a gap (``sync.on_gap``), else run the range each needs next, for those tables only,
    once their own pause after a failure is over (:mod:`.table_failures`). (None, why): they
    wait, and the others keep syncing (``why`` goes into the tick's skip reason). When every
    table is behind and none failed on its own (the run failed as a whole: the source
    unreachable, a killed run), nothing else can go on: the newest range runs again."""
    whole = len(behind) == len(snapshots)
    ranges = RangeReader(instance, partitions.name)  # one read for every table behind
    needs = {t: _next_range_of(ranges, source, t, snapshots[t], last, sync) for t in behind}
    gaps = {
        t: reason
        for t, r in needs.items()
        if (reason := _gaps(source, r, {t: snapshots[t]}).get(t)) is not None
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
            return (_skip_tick(wait) if whole else None), wait
        reason = f"re-snapshot: range {needs[first].key} could not be read ({gaps[first]})"
        request = _request(
            instance, source, SNAPSHOT_PARTITION, list(gaps), {RESNAPSHOT_TAG: reason[:1000]}
        )
        return Tick((request,), None, None), ""
    waits = _table_waits(source, sync, behind, now())
    ready = [t for t in behind if t not in waits]
    if not ready:
        why = _waiting_text(source, sync, waits)
        return (_skip_tick(why) if whole else None), why
    if whole and not waits:
        # the newest range again, for the tables that changed in it (the run records the
        # others quiet, as the failed run would have)
        tables: list[Table] | None = None
        try:
            conn = source.connect()
            try:
                tables = _tables_to_run(conn, sync, list(snapshots), last)
            finally:
                conn.close()
        except SqlServerError:
            pass  # the source still down: every table, and the run says why
        request = _request(instance, source, last.key, tables, mirrors=tables is not None)
        return Tick((request,), None, None), ""
    target = min((needs[t] for t in ready), key=lambda r: r.lo)
    tables = [t for t in ready if needs[t] == target]
    request = _request(instance, source, target.key, tables, {CATCH_UP_TAG: "true"}, mirrors=True)
    return Tick((request,), None, None), ""


def _skip(waiting: str, reason: str) -> Tick:
    """A tick without a run: what tables behind wait for, then why nothing else runs."""
    return _skip_tick(f"{waiting}; {reason}" if waiting else reason)


def _snapshot_lane(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    sync: SourceSync,
    flight: InFlight,
) -> tuple[Tick | None, str]:
    """The run that snapshots the tables without a snapshot that no run works on and that do
    not wait after a failure of their own (a snapshot runs beside the ranges of the others,
    which go on: a huge table's snapshot holds back no other table). (None, why) when none."""
    missing = [t for t in source.tables if sync[t].snapshot is None and t not in flight.busy]
    running = flight.snapshots_text()
    if not missing:
        return None, running
    waits = _table_waits(source, sync, missing, now())
    ready = [t for t in missing if t not in waits]
    parts = [running] if running else []
    if waits:
        parts.append(f"snapshot {_waiting_text(source, sync, waits)}")
    why = "; ".join(parts)
    if not ready:
        return None, why
    known = instance.has_dynamic_partition(partitions.name, SNAPSHOT_PARTITION)
    new = SNAPSHOT_PARTITION if not known else None
    request = _request(instance, source, SNAPSHOT_PARTITION, ready)
    return Tick((request,), new, None), why


def evaluate(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    last_added: float | None = None,
) -> Tick:
    """One tick of the sync sensor for ``source`` (see the module doc): a run for the tables
    that need a snapshot, and a run for the next range of the tables that have one; either,
    both or none."""
    if not source.tables:
        return _skip_tick(f"source {source.name} has no captured tables selected")
    flight = InFlight.read(instance, source)
    if (why := _recent_failure(instance, source)) is not None:
        return _skip_tick("; ".join(x for x in (why, flight.text()) if x))
    sync = SourceSync.load(source)  # every table's position in one read
    snapshot, snapshot_why = _snapshot_lane(instance, source, partitions, sync, flight)
    ranged = _range_lane(instance, source, partitions, sync, flight, last_added)
    if snapshot is None:
        if snapshot_why and ranged.skip_reason is not None:
            return replace(ranged, skip_reason=f"{snapshot_why}; {ranged.skip_reason}")
        return ranged
    if ranged.run_request is None:
        return snapshot
    return Tick(
        (*snapshot.run_requests, *ranged.run_requests),
        ranged.new_partition or snapshot.new_partition,
        None,
        ranged.retired,
    )


def _range_lane(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    sync: SourceSync,
    flight: InFlight,
    last_added: float | None,
) -> Tick:
    """The next range run of the tables that have a snapshot and no snapshot run in flight.
    While a range run is in flight, the next range's run may be asked for already
    (:func:`_range_ahead`)."""
    if flight.range_runs:
        return _range_ahead(instance, source, partitions, sync, flight)
    snapshots = {
        t: snap
        for t in source.tables
        if t not in flight.busy and (snap := sync[t].snapshot) is not None
    }
    if not snapshots:
        return _skip_tick("no table has a snapshot yet")

    # the chain's end from the newest keys only: a tick costs the same at 10 or 100k partitions
    ranges = recent_ranges(instance, partitions.name)
    end = chain_end(ranges)
    behind: list[Table] = []
    waiting = ""  # why tables behind wait: said in a skip reason
    if end is not None:
        last = ranges[-1]
        behind = [t for t, s in snapshots.items() if not _range_complete(source, sync, t, last, s)]
        if behind:
            decided, waiting = _catch_up(
                instance, source, partitions, behind, snapshots, last, sync
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
            return _skip(waiting, f"max LSN {maximum.hex} has not moved past {start.hex}")
        if end is None:
            needed = max(s.snapshot_lsn for s in snapshots.values())
            if maximum < needed:
                return _skip_tick(
                    f"waiting for capture to reach the snapshot LSN {needed.hex} "
                    f"(max LSN {maximum.hex})"
                )
        interval = source.config.sync.min_range_interval_seconds
        moment = now()
        if interval and last_added is not None and moment - last_added < interval:
            return _skip(waiting, f"the previous range was added less than {interval} s ago")
        next_range = plan_next_range(
            conn, start, source.config.sync.max_transactions_per_range, maximum=maximum
        )
        retired: tuple[LsnRange, ...] = ()
        # retire once per range added, and never while a table is behind: it needs those ranges
        if next_range is not None and end is not None and not behind:
            retired = _to_retire(instance, source, partitions, conn, ranges[-1])
        if next_range is None and _mirrors_wait_for_snapshot(sync, snapshots, maximum):
            # No transaction since, but capture has passed the snapshots that mirrors wait for
            # (a first snapshot or a re-snapshot): a range without changes brings them up.
            next_range = LsnRange(start, maximum)
        if next_range is None:
            return _skip(waiting, f"no transaction was captured after {start.hex}")
        healthy = [t for t in snapshots if t not in behind]
        tables = _tables_to_run(conn, sync, healthy, next_range)
    finally:
        conn.close()
    request = _request(instance, source, next_range.key, tables, mirrors=True)
    return Tick((request,), next_range.key, None, retired)


def _range_ahead(
    instance: DagsterInstance,
    source: Source,
    partitions: DynamicPartitionsDefinition,
    sync: SourceSync,
    flight: InFlight,
) -> Tick:
    """The next range's run while the run of the chain's last range is still in flight: its
    fixed costs (queue, process start, code location, Spark session) pass while that run
    works, and its steps wait for it (:mod:`.range_order`), so every table applies its ranges
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
    tables = [t for t in source.tables if t not in flight.busy and sync[t].snapshot is not None]
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
        tables = _tables_to_run(conn, sync, tables, next_range, ahead=True)
    finally:
        conn.close()
    request = _request(instance, source, next_range.key, tables, mirrors=True)
    return Tick((request,), next_range.key, None)


# dagster-daemon evaluates each sensor at most every 5 s (its loop), whatever the sensor's own
# minimum interval. A source that asks for a shorter interval is watched within a tick: the
# evaluation is repeated every ``sensor_interval_seconds`` until a run is due or the daemon's next
# loop comes, and while a range run is in flight, its end is noticed within RUN_POLL_SECONDS.
DAEMON_LOOP_SECONDS = 5.0
RUN_POLL_SECONDS = 0.25


def watch_seconds(source: Source) -> float:
    """How long one tick of ``source``'s sensor keeps watching (0: it evaluates once)."""
    interval = source.config.sync.sensor_interval_seconds
    return DAEMON_LOOP_SECONDS - 0.5 if interval < DAEMON_LOOP_SECONDS else 0.0


def _still_in_flight(instance: DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and run.status in IN_FLIGHT


def unreachable_reason(source: Source, exc: SqlServerError) -> str:
    """The skip reason of a tick whose source could not be reached (or refused the login)."""
    return (
        f"source {source.name!r} is unreachable: {exc} Its assets stay as last recorded; the "
        "sync resumes where the chain ends once the source answers."
    )


def build_sync_sensor(
    source: Source,
    partitions: DynamicPartitionsDefinition,
    job: UnresolvedAssetJobDefinition,
) -> SensorDefinition:
    interval = float(source.config.sync.sensor_interval_seconds)
    watch = watch_seconds(source)

    @sensor(
        name=sensor_name(source.name),
        job=job,
        minimum_interval_seconds=source.config.sync.sensor_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Keeps the change logs and mirrors of source '{source.name}' in sync: adds "
        "the next LSN range when the max LSN moves and requests one run for it.",
    )
    def sync(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        cursor = json.loads(context.cursor) if context.cursor else {}
        deadline = time.monotonic() + watch
        while True:
            started = time.monotonic()
            decided = decide(context, cursor)
            if isinstance(decided, SensorResult) or started + interval >= deadline:
                return decided[0] if isinstance(decided, tuple) else decided
            # nothing to run yet: evaluate again after the interval, or as soon as the range
            # run in flight ends
            _, blocked_by = decided
            while time.monotonic() < min(started + interval, deadline):
                time.sleep(RUN_POLL_SECONDS)
                if blocked_by and not _still_in_flight(context.instance, blocked_by):
                    break
            if time.monotonic() >= deadline:
                return decided[0]

    def decide(
        context: SensorEvaluationContext, cursor: dict
    ) -> SensorResult | tuple[SkipReason, str | None]:
        """One evaluation: the runs to request, or why none and the run it waits for."""
        with sensor_lock(context.instance, source.name) as locked:
            if not locked:
                reason = f"another evaluation of the {source.name} sensor is running"
                return SkipReason(reason), None
            try:
                tick = evaluate(context.instance, source, partitions, cursor.get("last_added"))
            except SqlServerError as exc:
                if not is_source_level(exc):
                    raise
                return SkipReason(unreachable_reason(source, exc)), None
            if tick.new_partition is not None:  # visible to the next evaluation at once
                context.instance.add_dynamic_partitions(partitions.name, [tick.new_partition])
            retire(context.instance, partitions.name, tick.retired)
        if not tick.run_requests:
            return SkipReason(tick.skip_reason), tick.blocked_by
        requests = []
        if tick.new_partition is not None:
            requests.append(partitions.build_add_request([tick.new_partition]))
            cursor["last_added"] = dt.datetime.now(dt.UTC).timestamp()
            cursor["last_key"] = tick.new_partition
        return SensorResult(
            run_requests=list(tick.run_requests),
            dynamic_partitions_requests=requests,
            cursor=json.dumps(cursor),
        )

    return sync
