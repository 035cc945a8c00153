"""How long a table or a source waits after a failure: the retry pause, doubling up to
``sync.max_retry_pause``, and the skip reason that says who waits and until when."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    RunsFilter,
)

from cdc_assets.config import duration_seconds

from .names import (
    PARTITION_TAG,
    SOURCE_TAG,
)
from .range_order import FINISHED
from .source import CapturedTable, Source
from .sync_state import SourceSync, TableSync
from .table_failures import FAILED_TABLES_TAG, seconds_to_wait


def retry_pause(source: Source) -> float:
    """The pause after a failed run: before the source is tried again after a run that failed
    as a whole, before a table is tried again after its first failure in a row."""
    return max(30.0, 6.0 * source.config.sync.sensor_interval_seconds)


def table_waits(
    source: Source,
    sync: SourceSync,
    tables: Iterable[CapturedTable],
    moment: float,
    *,
    history: bool = False,
) -> dict[CapturedTable, float]:
    """Those of ``tables`` that failed on their own a moment ago (``history``: whose history
    did): the seconds each still waits (the pause grows with each failure in a row,
    :mod:`.table_failures`)."""
    return {
        t: left
        for t in tables
        if (left := table_wait(source, sync[t], moment, history=history)) is not None
    }


def table_wait(
    source: Source, row: TableSync, moment: float, *, history: bool = False
) -> float | None:
    """How long a table whose sync-state row is ``row`` (``history``: its history) still waits
    after its failures before the sensor tries it again; None when it may go now."""
    bound = duration_seconds(source.config.sync.max_retry_pause)
    return seconds_to_wait(row, retry_pause(source), bound, moment, history=history)


def waiting_text(source: Source, sync: SourceSync, waits: Mapping[CapturedTable, float]) -> str:
    """What the tables in ``waits`` wait for, for a skip reason (the first few by name)."""
    shown = sorted(waits, key=lambda t: t.qualified_name)
    parts = [
        f"{t.qualified_name} (failed {sync[t].failures or sync[t].history_failures}x, next try "
        f"in {waits[t]:.0f} s: {(sync[t].failure or sync[t].history_failure or '')[:200]})"
        for t in shown[:3]
    ]
    more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
    return "waiting after failures: " + "; ".join(parts) + more


def recent_failure(instance: DagsterInstance, source: Source) -> str | None:
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
    pause = retry_pause(source)
    if waited >= pause:
        return None
    return (
        f"run {run.run_id} ({run.tags.get(PARTITION_TAG, '?')}) failed {waited:.0f} s "
        f"ago; retrying after {pause:.0f} s"
    )
