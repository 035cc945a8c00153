"""``at_chain_end``: is an asset that follows the chain (a mirror, a history) at the chain's end,
and when it is not, is the sync on its way there or stuck (docs/design.md, "at_chain_end").

The sensor asks for the next range's run while the previous range run is in flight
(:mod:`.range_order`), so nearly always the chain ends a range or two past the mirrors: that is
the sync keeping up, not a problem. :func:`at_chain_end` judges from what a check knows — the
asset's position, the chain's newest ranges, the source's runs, when the sensor added the newest
range, the table's failures in the sync state — in one place, for every asset that follows the
chain:

- **passes** at the chain's end, and while every range past the asset is on its way: a run that
  moves it (a range run, a catch-up or snapshot run of its table) is queued, starting or running;
  other range runs hold the lane (the run judging it, say a catch-up that brings the table one
  range of several), and the sensor asks for the table's next run when they end; or the range was
  added a moment ago and the sensor is asking for its run. The metadata says how many ranges are
  behind and in flight, the LSNs, and for how many seconds the asset has been behind;
- **fails** (WARN) only when the sync is stuck for it, saying which run or range and what to do:
  a run failed for the table (its sync-state row counts the failures) or a range run failed as a
  whole, and no run was asked for since; the run that would move it has waited longer than a run
  waits to start (:attr:`Patience.start` once launched, :attr:`Patience.queue` in the run
  queue); or a range past it has had no run for longer than :attr:`Patience.ask`, the time the
  sensor needs to ask for one.

A run that hangs while running, or capture that stops, leaves the chain where the asset is: the
mirrors' freshness policy covers "the mirror stopped moving", and ``capture_health`` the capture
job. The check is evaluated by the mirrors step of every range run for its mirrors (the
change-log step for the quiet ones), by the health job every 5 minutes (so a stall that no run
reports still turns the check red), and on demand ("Execute checks").

The mirrors step yields its evaluations itself instead of a check step after it: a mirrors step
that fails for one table (its mirror stays where it was) would leave such a step unexecuted, and
the UI would show every mirror of the run red ("execution failed") although only one is behind.
Evaluations are yielded before the step may raise its Failure: events logged with
``context.log_event`` reach Dagster only with the step's next yield.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
)

from cdc_assets.lsn import Lsn, LsnRange

from .chain import chain_end, newest_added, recent_ranges
from .names import SNAPSHOT_PARTITION, partitions_name, sensor_name
from .retry_waits import retry_pause, table_wait
from .runs_in_flight import DAEMON_LOOP_SECONDS, LAUNCHED, RunSeen, SourceRuns
from .source import CapturedTable, Source
from .sync_state import TableSync, now

AT_CHAIN_END = "at_chain_end"
# The sensor asks for a range's run in the tick that adds the range (and for a table's catch-up
# in the tick after a run ends); six ticks leave room for a busy daemon and a slow source.
ASK_TICKS = 6


@dataclass(frozen=True)
class Patience:
    """How long the sync may take before a range without a run means it is stuck."""

    ask: float  # s after a range was added or a run of the source ended: its run was asked for
    start: float  # s after a run left the queue (was launched): it has started
    queue: float  # s after a run was asked for: it has left the run queue


def patience(source: Source) -> Patience:
    """Six sensor ticks (at least 30 s) to ask for a run; four times that for a launched run to
    start (a worker process, the code location); the mirrors' freshness window in the run queue
    (the queue's limits hold a range run behind other runs for minutes, say a maintenance run's
    VACUUMs: the sync is slowed, not stuck; a queue that never moves is stuck)."""
    tick = max(DAEMON_LOOP_SECONDS, float(source.config.sync.sensor_interval_seconds))
    ask = max(30.0, ASK_TICKS * tick)
    _, overdue = source.config.sync.freshness_windows()
    return Patience(ask=ask, start=4 * ask, queue=overdue)


@dataclass(frozen=True)
class ChainEndView:
    """What the chain-end checks of a source know besides each asset's position, read once per
    step: the chain's newest ranges, the source's runs, the newest range the sensor added and
    when, and the moment."""

    source: Source
    ranges: tuple[LsnRange, ...]
    runs: SourceRuns
    added: tuple[str, float] | None
    moment: float

    @classmethod
    def read(cls, instance: DagsterInstance, source: Source) -> ChainEndView:
        """Read now (three queries of the instance and its key-value store): a step's earlier
        read of the chain may not hold the range the sensor added since."""
        name = partitions_name(source.name)
        return cls(
            source,
            tuple(recent_ranges(instance, name)),
            SourceRuns.read(instance, source),
            newest_added(instance, name),
            now(),
        )

    def result(
        self, key: AssetKey, table: CapturedTable, at: Lsn | None, row: TableSync
    ) -> AssetCheckResult:
        """``at_chain_end`` of the asset ``key`` of ``table``, at ``at`` (None: not built yet);
        ``row``: the table's sync-state row (its failures)."""
        return at_chain_end(self, key, table, at, row)


def _moves(run: RunSeen, table: CapturedTable, at: Lsn | None) -> bool:
    """``run`` brings ``table``'s assets past ``at``."""
    if table not in run.tables:
        return False
    if run.partition == SNAPSHOT_PARTITION:
        return True
    lsn_range = run.lsn_range
    return lsn_range is not None and (at is None or lsn_range.hi > at)


def _ago(view: ChainEndView, moment: float) -> str:
    return f"{max(0.0, view.moment - moment):.0f} s ago"


def _failed_for_table(
    view: ChainEndView, table: CapturedTable, row: TableSync, moving: list[RunSeen]
) -> str | None:
    """Why the table waits after a failure of its own that no run has retried yet; None if
    it has none or a run asked for since it failed moves it."""
    if row.failures <= 0 or row.failed_at is None:
        return None
    if any(run.created > row.failed_at for run in moving):
        return None  # retried: that run is on its way
    runs = (*view.runs.in_flight, *view.runs.finished)
    failed = max(
        (r for r in runs if table.qualified_name in r.failed_tables),
        key=lambda r: r.created,
        default=None,
    )
    which = f"run {failed.run_id} ({failed.partition})" if failed else "a run"
    wait = table_wait(view.source, row, view.moment)
    when = (
        f"the sync sensor tries it again in {wait:.0f} s"
        if wait
        else "the sync sensor tries it again at its next tick"
    )
    return (
        f"{which} failed for {table.qualified_name} ({row.failures} time(s) in a row, the last "
        f"{_ago(view, row.failed_at)}): {(row.failure or 'no reason recorded')[:500]}. {when} "
        "(the pause doubles with each failure in a row, up to sync.max_retry_pause). If it "
        "keeps failing, read that run's log and fix the cause; a gap or a schema change is mended "
        "by re-snapshotting the table (materialize its 'snapshot' partition)."
    )


def _failed_whole(view: ChainEndView, table: CapturedTable, moving: list[RunSeen]) -> str | None:
    """Why the table waits after the source's newest range run failed as a whole (the source
    unreachable, a killed run process) and no run was asked for since; None otherwise."""
    newest = next((r for r in view.runs.finished if r.lsn_range is not None), None)
    if newest is None or not newest.failed_whole or table not in newest.tables:
        return None
    ended = newest.ended if newest.ended is not None else newest.created
    if any(run.created > ended for run in moving):
        return None
    how = "was canceled" if newest.status == DagsterRunStatus.CANCELED else "failed"
    why = f": {newest.failure}" if newest.failure else ""
    return (
        f"run {newest.run_id} of range {newest.partition} {how} {_ago(view, ended)}{why}. The "
        f"sync sensor runs the range again after {retry_pause(view.source):.0f} s; if it fails "
        "again, read the run's log (Runs) and fix the cause (the source unreachable, a run "
        "process killed)."
    )


def _not_starting(view: ChainEndView, run: RunSeen, limits: Patience) -> str | None:
    """Why ``run`` will not start, if it has waited longer than a run waits to start: in the
    run queue since it was asked for, or launched (out of the queue) since its last status."""
    if run.status == DagsterRunStatus.QUEUED and view.moment - run.created > limits.queue:
        return (
            f"run {run.run_id} ({run.partition}) has waited in the run queue since "
            f"{_ago(view, run.created)} (a queued run starts within {limits.queue:.0f} s): the "
            "queue's limits hold it (max_concurrent_runs, tag cdc_assets/range_lane), or the run "
            "queue does not run. Check dagster-daemon (Deployment, Daemons) and the runs ahead of "
            "it; terminate it and the sync sensor asks for it again."
        )
    if run.status in LAUNCHED and view.moment - run.updated > limits.start:
        return (
            f"run {run.run_id} ({run.partition}) was launched {_ago(view, run.updated)} and has "
            f"not started ({run.status.value}; a launched run starts within "
            f"{limits.start:.0f} s): the run launcher or its worker does not start it. Read "
            "dagster-daemon's log; terminate the run and the sync sensor asks for it again."
        )
    return None


def _behind_since(view: ChainEndView, behind: list[LsnRange]) -> float | None:
    """When the first range past the asset was asked for (its first run, or its addition)."""
    keys = {r.key for r in behind}
    moments = [
        run.created for run in (*view.runs.in_flight, *view.runs.finished) if run.partition in keys
    ]
    if view.added is not None and view.added[0] in keys:
        moments.append(view.added[1])
    return min(moments, default=None)


def at_chain_end(
    view: ChainEndView, key: AssetKey, table: CapturedTable, at: Lsn | None, row: TableSync
) -> AssetCheckResult:
    """The shared judgement (see the module doc) for the asset ``key`` of ``table`` at ``at``."""
    end = chain_end(view.ranges)
    metadata: dict[str, Any] = {
        "at_lsn": at.hex if at is not None else "none",
        "chain_end": end.hex if end is not None else "none",
    }
    if at is not None and end is not None and at >= end:
        metadata.update(ranges_behind=0, ranges_in_flight=0)
        return _result(key, True, f"at the end of the chain ({end.hex})", metadata)

    behind = [r for r in view.ranges if at is None or r.hi > at]
    moving = [run for run in view.runs.in_flight if _moves(run, table, at)]
    # other range runs in flight hold the range lane (this very run, catch-ups of other tables):
    # the sensor asks for the table's next run when they end
    lane = [r for r in view.runs.in_flight if r.lsn_range is not None and r not in moving]
    flying = {run.partition for run in moving if run.lsn_range is not None}
    metadata.update(ranges_behind=len(behind), ranges_in_flight=len(flying))
    gap = (
        f"{len(behind)} range(s) behind the chain's end ("
        f"{at.hex if at is not None else 'not built yet'} -> "
        f"{end.hex if end is not None else 'no range yet'})"
    )
    since = _behind_since(view, behind)
    if since is not None:
        metadata["behind_seconds"] = round(max(0.0, view.moment - since), 1)
        gap += f" for {metadata['behind_seconds']:.0f} s"
    if moving or lane:
        metadata["runs_in_flight"] = ", ".join(run.text() for run in (*moving, *lane))

    failed = _failed_for_table(view, table, row, moving) or _failed_whole(view, table, moving)
    if failed is not None:
        return _result(key, False, f"{gap}: {failed}", metadata)

    limits = patience(view.source)
    waiting = [*moving, *lane]
    if waiting:
        late = [why for r in waiting if (why := _not_starting(view, r, limits)) is not None]
        if len(late) == len(waiting):
            return _result(key, False, f"{gap}: {late[0]}", metadata)
        runs = ", ".join(r.text() for r in waiting)
        how = (
            f"in flight: {runs}"
            if moving
            else f"the sync sensor asks for the run of range {behind[0].key if behind else '?'} "
            f"when the range run(s) in flight end: {runs}"
        )
        return _result(key, True, f"{gap}, {how}. The sync is on its way.", metadata)

    last_run = max((r.ended or r.created for r in view.runs.finished), default=None)
    moments = [m for m in (last_run, view.added[1] if view.added else None) if m is not None]
    idle = max(moments, default=None)
    first_key = behind[0].key if behind else "the first range"
    if idle is not None and view.moment - idle <= limits.ask:
        return _result(
            key,
            True,
            f"{gap}: the sync sensor is asking for the run of range {first_key} (it does within "
            f"{limits.ask:.0f} s of the range's addition or of the source's last run).",
            metadata,
        )
    for_how_long = f"for {view.moment - idle:.0f} s" if idle is not None else "at all"
    return _result(
        key,
        False,
        f"{gap}: no run has been asked for range {first_key}"
        + (f" and {len(behind) - 1} more" if len(behind) > 1 else "")
        + f" {for_how_long} (the sync sensor asks within {limits.ask:.0f} s). Check that the "
        f"sensor {sensor_name(view.source.name)} is running (Automation) and dagster-daemon "
        "too; or launch the range from the asset's Materialize dialog.",
        metadata,
    )


def _result(key: AssetKey, passed: bool, description: str, metadata: dict) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=key,
        check_name=AT_CHAIN_END,
        passed=passed,
        severity=AssetCheckSeverity.WARN,
        description=description,
        metadata=metadata,
    )


def as_evaluation(result: AssetCheckResult, partition: str | None) -> AssetCheckEvaluation:
    """``result`` as an event a step may log for a check outside its selection."""
    assert result.asset_key is not None and result.check_name is not None
    return AssetCheckEvaluation(
        asset_key=result.asset_key,
        check_name=result.check_name,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        partition=partition,
    )
