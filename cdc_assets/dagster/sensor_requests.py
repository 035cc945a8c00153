"""What one tick of the sync sensor decides (:class:`Tick`) and the run requests it makes:
the run key, the tags naming the tables, the selection of change logs, mirrors and checks."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass

from dagster import (
    AssetCheckKey,
    DagsterInstance,
    RunRequest,
    RunsFilter,
)

from cdc_assets.lsn import LsnRange

from .health_checks import CAPTURE_HEALTH
from .sync.names import (
    CHANGE_LOG_CHECKS,
    PARTITION_TAG,
    RANGE_LANE_TAG,
    SNAPSHOT_OF_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
    TABLES_TAG,
)
from .sync.quiet_ranges import REPORT_EVERY_RANGE_UP_TO
from .sync.source import CapturedTable, Source


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


def skip_tick(reason: str) -> Tick:
    return Tick((), None, reason)


def skip(waiting: str, reason: str) -> Tick:
    """A tick without a run: what tables behind wait for, then why nothing else runs."""
    return skip_tick(f"{waiting}; {reason}" if waiting else reason)


SNAPSHOT_OF_TABLES = 50  # snapshot runs of at most this many tables name them in a tag


def run_request(
    instance: DagsterInstance,
    source: Source,
    partition: str,
    tables: list[CapturedTable] | None = None,
    extra_tags: dict[str, str] | None = None,
    *,
    mirrors: bool = False,
    without_histories: Collection[CapturedTable] = (),
) -> RunRequest:
    """The run for ``partition``. Its run key is the partition and how many runs of it were
    already launched, so two evaluations that decide the same thing before either run exists
    (racing ticks) ask for one run: Dagster launches one run per run key of a sensor. A range
    run (``mirrors``) has the tables' histories too, but ``without_histories``."""
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
            selection += [
                t.history_key
                for t in tables
                if source.has_history(t) and t not in without_histories
            ]
            # capture_health is one set of queries for the whole source: in a source whose
            # quiet tables are reported every range, theirs too (the UI shows a check passed
            # only when its latest result is from the run of the latest materialization)
            healthy = tables if len(source.tables) > REPORT_EVERY_RANGE_UP_TO else source.tables
            checks += [AssetCheckKey(t.change_log_key, CAPTURE_HEALTH) for t in healthy]
            # at_chain_end: reported by the mirrors step itself (:mod:`.sync.chain_end_check`)
    return RunRequest(
        run_key=f"{partition}#{attempt}",
        partition_key=partition,
        asset_selection=selection,
        asset_check_keys=checks,
        tags={**tags, **(extra_tags or {})},
    )
