"""A source's runs in flight: which tables they work on, and how many range runs may go at once;
the source's runs as the chain-end checks judge them (:class:`RunSeen`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterRun,
    DagsterRunStatus,
    RunRecord,
    RunsFilter,
)

from cdc_assets.lsn import LsnRange

from .names import (
    CATCH_UP_TAG,
    PARTITION_RUN_TAG,
    SNAPSHOT_OF_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
)
from .range_order import FINISHED, IN_FLIGHT
from .source import CapturedTable, Source
from .table_failures import FAILED_TABLES_TAG

# Range runs of a source in flight at once: one working, the next one starting (queue, process,
# code location, Spark session) and then waiting for it (:mod:`.range_order`).
RANGE_RUNS_IN_FLIGHT = 2
# dagster-daemon evaluates each sensor at most every 5 s (its loop), whatever the sensor's own
# minimum interval.
DAEMON_LOOP_SECONDS = 5.0
LAUNCHED = (
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
)  # out of the queue, not started


@dataclass(frozen=True)
class InFlight:
    """The source's runs that have not finished: the tables the snapshot runs among them work
    on, and the range runs (newest first; snapshot runs go beside them)."""

    busy: frozenset[CapturedTable]
    range_runs: tuple[DagsterRun, ...]
    snapshot_runs: tuple[DagsterRun, ...] = ()

    @classmethod
    def read(cls, instance: DagsterInstance, source: Source) -> InFlight:
        runs = instance.get_runs(
            filters=RunsFilter(tags={SOURCE_TAG: source.name}, statuses=IN_FLIGHT), limit=100
        )
        busy: set[CapturedTable] = set()
        ranged, snapshots = [], []
        for run in runs:
            if run.tags.get(PARTITION_RUN_TAG) == SNAPSHOT_PARTITION:
                busy |= selected_tables(source, run)
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


def selected_tables(source: Source, run: DagsterRun) -> set[CapturedTable]:
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


def still_in_flight(instance: DagsterInstance, run_id: str) -> bool:
    run = instance.get_run_by_id(run_id)
    return run is not None and run.status in IN_FLIGHT


def failure_message(instance: DagsterInstance, run_id: str, chars: int = 300) -> str:
    """Why a finished run failed, in one line: the error of its first failed step (the cause a
    user's code raised, not Dagster's wrapping of it), else the run's; "" when none is recorded."""
    for kind in (DagsterEventType.STEP_FAILURE, DagsterEventType.RUN_FAILURE):
        found = instance.get_records_for_run(run_id, of_type=kind, limit=1).records
        if not found:
            continue
        entry = found[0].event_log_entry
        event = entry.dagster_event
        error = getattr(event.event_specific_data, "error", None) if event else None
        while error is not None and error.cause is not None:  # the user's error
            error = error.cause
        text = error.message if error is not None else entry.user_message
        return " ".join(str(text).split())[:chars]
    return ""


@dataclass(frozen=True)
class RunSeen:
    """A run of a source as the chain-end checks judge it (:mod:`.chain_end_check`)."""

    run_id: str
    partition: str  # 'snapshot', a range key, or '' (a run of no partition)
    status: DagsterRunStatus
    created: float  # when it was asked for (seconds since the epoch)
    updated: float  # when its status last changed
    ended: float | None
    tables: frozenset[CapturedTable]  # the tables whose mirror it may move
    failed_tables: frozenset[str]  # the tables it failed for (its tag), by qualified name
    failure: str = ""  # why it failed, for a run that failed as a whole

    @classmethod
    def of(cls, source: Source, record: RunRecord) -> RunSeen:
        run = record.dagster_run
        partition = run.tags.get(PARTITION_RUN_TAG, "")
        ranged = LsnRange.is_key(partition) and partition != SNAPSHOT_PARTITION
        # a range run records the range for the tables it does not work on (quiet ones), so
        # it moves every mirror; a catch-up or a snapshot run only those it selects
        everyone = ranged and CATCH_UP_TAG not in run.tags
        tables = set(source.tables) if everyone else selected_tables(source, run)
        named = run.tags.get(FAILED_TABLES_TAG, "")
        return cls(
            run.run_id,
            partition,
            run.status,
            record.create_timestamp.timestamp(),
            record.update_timestamp.timestamp(),
            record.end_time,
            frozenset(tables),
            frozenset(n.strip() for n in named.split(", ") if n.strip()),
        )

    @property
    def lsn_range(self) -> LsnRange | None:
        if self.partition == SNAPSHOT_PARTITION or not LsnRange.is_key(self.partition):
            return None
        return LsnRange.parse_key(self.partition)

    @property
    def failed_whole(self) -> bool:
        """It failed (or was canceled) as a whole: not for some tables only, which its tag names."""
        failed = self.status in (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
        return failed and not self.failed_tables

    def text(self) -> str:
        return f"{self.run_id[:8]} ({self.partition or 'no partition'}, {self.status.value})"


@dataclass(frozen=True)
class SourceRuns:
    """The runs of a source the chain-end checks judge by: every run in flight, and the newest
    few finished (newest first); two queries."""

    in_flight: tuple[RunSeen, ...]
    finished: tuple[RunSeen, ...]

    @classmethod
    def read(cls, instance: DagsterInstance, source: Source, finished: int = 10) -> SourceRuns:
        tags = {SOURCE_TAG: source.name}
        flying = instance.get_run_records(RunsFilter(tags=tags, statuses=IN_FLIGHT), limit=100)
        done = instance.get_run_records(RunsFilter(tags=tags, statuses=FINISHED), limit=finished)
        seen = [RunSeen.of(source, r) for r in done]
        ranged = [r for r in seen if r.lsn_range is not None]
        if ranged and ranged[0].failed_whole:  # the only failure a check quotes: say why
            seen[seen.index(ranged[0])] = replace(
                ranged[0], failure=failure_message(instance, ranged[0].run_id)
            )
        return cls(tuple(RunSeen.of(source, r) for r in flying), tuple(seen))
