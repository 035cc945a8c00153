"""A source's runs in flight: which tables they work on, and how many range runs may go at once."""

from __future__ import annotations

import json
from dataclasses import dataclass

from dagster import (
    DagsterInstance,
    DagsterRun,
    RunsFilter,
)

from .names import (
    PARTITION_RUN_TAG,
    SNAPSHOT_OF_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
)
from .range_order import IN_FLIGHT
from .source import CapturedTable, Source

# Range runs of a source in flight at once: one working, the next one starting (queue, process,
# code location, Spark session) and then waiting for it (:mod:`.range_order`).
RANGE_RUNS_IN_FLIGHT = 2


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
