"""Continuous sync: one sensor per source.

Each tick sends one cheap query to the source (``sys.fn_cdc_get_max_lsn()``), whatever the number
of tables, and more only when the max LSN moved past the end of the chain. A source has two
lanes of runs, which go side by side, so a long snapshot never holds back the ranges of the
other tables:

- **snapshots**: the tables without a snapshot (new, re-snapshotted, or still under way after a
  kill: the run resumes it) that no run works on get one run of the ``snapshot`` partition;
- **ranges**: one range run at a time, for the tables that have a snapshot and no run in flight.

Before either, a run of the source that failed as a whole (the source unreachable, a killed process)
a moment ago pauses the source. A run that failed for some tables only names them in its tag and
writes each one's failure into the sync state (:mod:`.sync.table_failures`): those tables wait, the
pause doubling with each failure in a row up to ``sync.max_retry_pause``, and the others go on. In
the range lane, in order:

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
a lock in the Dagster instance while they decide and add the range (:mod:`.sync.sensor_lock`; two
overlapping evaluations would otherwise add overlapping ranges), and every run request has the
run key ``<partition>#<runs so far>``, so evaluations that ask for the same run before it exists
get one run.

The range lane's decisions are in :mod:`.range_lane`, the run requests and :class:`Tick` in
:mod:`.sensor_requests`, the runs in flight and the retry pauses in :mod:`.sync.runs_in_flight`
and :mod:`.sync.retry_waits`.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import replace

from dagster import (
    DagsterInstance,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition,
)

from cdc_assets.sqlserver.errors import SqlServerError

from .range_lane import (
    range_lane,
)
from .sensor_requests import Tick, run_request, skip_tick
from .sync.chain import add_partition, retire
from .sync.io_manager import is_source_level
from .sync.names import (
    SNAPSHOT_PARTITION,
    sensor_name,
)
from .sync.retry_waits import recent_failure, table_waits, waiting_text
from .sync.runs_in_flight import DAEMON_LOOP_SECONDS, InFlight, still_in_flight
from .sync.sensor_lock import sensor_lock
from .sync.source import Source
from .sync.sync_state import SourceSync, now


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
    waits = table_waits(source, sync, missing, now())
    ready = [t for t in missing if t not in waits]
    parts = [running] if running else []
    if waits:
        parts.append(f"snapshot {waiting_text(source, sync, waits)}")
    why = "; ".join(parts)
    if not ready:
        return None, why
    known = instance.has_dynamic_partition(partitions.name, SNAPSHOT_PARTITION)
    new = SNAPSHOT_PARTITION if not known else None
    request = run_request(instance, source, SNAPSHOT_PARTITION, ready)
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
        return skip_tick(f"source {source.name} has no captured tables selected")
    flight = InFlight.read(instance, source)
    if (why := recent_failure(instance, source)) is not None:
        return skip_tick("; ".join(x for x in (why, flight.text()) if x))
    sync = SourceSync.load(source)  # every table's position in one read
    snapshot, snapshot_why = _snapshot_lane(instance, source, partitions, sync, flight)
    ranged = range_lane(instance, source, partitions, sync, flight, last_added)
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


# dagster-daemon evaluates each sensor at most every DAEMON_LOOP_SECONDS, whatever the sensor's
# own minimum interval. A source that asks for a shorter interval is watched within a tick: the
# evaluation is repeated every ``sensor_interval_seconds`` until a run is due or the daemon's next
# loop comes, and while a range run is in flight, its end is noticed within RUN_POLL_SECONDS.
RUN_POLL_SECONDS = 0.25


def watch_seconds(source: Source) -> float:
    """How long one tick of ``source``'s sensor keeps watching (0: it evaluates once)."""
    interval = source.config.sync.sensor_interval_seconds
    return DAEMON_LOOP_SECONDS - 0.5 if interval < DAEMON_LOOP_SECONDS else 0.0


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
                if blocked_by and not still_in_flight(context.instance, blocked_by):
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
                add_partition(context.instance, partitions.name, tick.new_partition)
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
