"""Range runs of a source apply their ranges in order, though the next may start before the
previous ends (docs/design.md, "No whole-run waits").

The sensor asks for the next range's run while the previous range run is still in flight, so the
new run's fixed costs (queue, process start, code location load, Spark session) pass while the
previous one works. Before it reads or writes anything, each step of a range run waits here until
no range run of its source for an earlier range is in flight: from then on it sees exactly what
it would have seen had it started after them (its tables' positions, quiet ranges recorded),
so each table applies its ranges in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dagster import DagsterInstance, DagsterRun, DagsterRunStatus, RunsFilter

from .names import PARTITION_RUN_TAG, RANGE_LANE_TAG

IN_FLIGHT = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
FINISHED = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
POLL_SECONDS = 0.2
# A run never waits longer than this for the runs before it: past it, a run that holds the lane
# (hung, or of an old code version) fails this one, which the sensor retries.
MAX_WAIT_SECONDS = 6 * 3600.0


def range_runs_in_flight(instance: DagsterInstance, source: str) -> list[DagsterRun]:
    """The source's range runs that have not finished (snapshot runs do not carry the lane)."""
    return list(
        instance.get_runs(
            filters=RunsFilter(tags={RANGE_LANE_TAG: source}, statuses=IN_FLIGHT), limit=20
        )
    )


def earlier_range_runs(instance: DagsterInstance, source: str, run: DagsterRun) -> list[DagsterRun]:
    """The range runs of ``source`` in flight for a range before ``run``'s (partition keys are
    fixed-width hex: their order is LSN order)."""
    mine = run.tags.get(PARTITION_RUN_TAG, "")
    return [
        other
        for other in range_runs_in_flight(instance, source)
        if other.run_id != run.run_id and other.tags.get(PARTITION_RUN_TAG, "") < mine
    ]


def wait_for_earlier_ranges(
    instance: DagsterInstance,
    source: str,
    run: DagsterRun,
    say: Callable[[str], None],
    *,
    poll: float = POLL_SECONDS,
    limit: float = MAX_WAIT_SECONDS,
) -> float:
    """Return once no range run of ``source`` for an earlier range is in flight; the seconds
    waited. ``say`` is told once what it waits for."""
    started = time.monotonic()
    told = False
    while earlier := earlier_range_runs(instance, source, run):
        if not told:
            names = ", ".join(
                f"{r.run_id[:8]} ({r.tags.get(PARTITION_RUN_TAG, '?')})" for r in earlier
            )
            say(f"waiting for the earlier range run(s) of {source} to finish first: {names}")
            told = True
        if time.monotonic() - started > limit:
            raise TimeoutError(
                f"range runs {', '.join(r.run_id for r in earlier)} of {source} have been in "
                f"flight for more than {limit:.0f} s; this run stops so that ranges stay in order "
                "(the sensor retries it). Cancel or fail a hung run in the UI to continue."
            )
        time.sleep(poll)
    return time.monotonic() - started
