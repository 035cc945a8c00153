"""A table that fails on its own is retried on its own schedule while the rest of its source goes
on (docs/design.md section 8).

A table fails alone when its snapshot, its range or its mirror cannot be read, written or merged
(a type it cannot convert, a keyless table without snapshot isolation, a capture instance gone).
The run that saw it writes the failure into the table's row of the sync state (how many runs in a
row failed for the table, when the last did, why) and names the tables in the run's tag
:data:`FAILED_TABLES_TAG`. The sensor reads both: the row says when the table may be tried
again — the pause doubles with each failure in a row, from the sensor's retry pause up to
``sync.max_retry_pause`` — and the tag tells such a run from one that failed as a whole (the
source unreachable, a killed process), after which the whole source pauses. A run in which the
table succeeds clears its count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from dagster import DagsterInstance
from pyspark.sql import SparkSession

from .source import CapturedTable
from .sync_state import SourceSync, TableSync, now

FAILED_TABLES_TAG = "cdc_assets/failed_tables"
MESSAGE_CHARS = 1000  # of the failure kept in the sync state (the run's log has it whole)
TAG_CHARS = 2000  # of the tag's value: the tables' names, cut with "..." beyond


def failed(row: TableSync, message: str, at: float, *, history: bool = False) -> TableSync:
    """``row`` after one more failure in a row, at ``at``, for ``message`` (``history``: of the
    table's history, counted apart: its mirror goes on)."""
    if history:
        return replace(
            row,
            history_failures=row.history_failures + 1,
            history_failed_at=at,
            history_failure=message[:MESSAGE_CHARS],
        )
    return replace(row, failures=row.failures + 1, failed_at=at, failure=message[:MESSAGE_CHARS])


def cleared(row: TableSync, *, history: bool = False) -> TableSync:
    """``row`` after a run in which the table (``history``: its history) succeeded."""
    if history:
        if not row.history_failures:
            return row
        return replace(row, history_failures=0, history_failed_at=None, history_failure=None)
    return replace(row, failures=0, failed_at=None, failure=None) if row.failures else row


def pause_after(failures: int, base: float, bound: float) -> float:
    """Seconds to wait after the last of ``failures`` failures in a row: ``base``, doubled with
    each further failure, at most ``bound`` (never below ``base``)."""
    if failures <= 0:
        return 0.0
    return min(max(bound, base), base * 2 ** min(failures - 1, 40))


def seconds_to_wait(
    row: TableSync, base: float, bound: float, moment: float, *, history: bool = False
) -> float | None:
    """How long the table (``history``: its history) still waits before its next attempt;
    None when it may go now."""
    failures, at = (
        (row.history_failures, row.history_failed_at) if history else (row.failures, row.failed_at)
    )
    if failures <= 0 or at is None:
        return None
    left = at + pause_after(failures, base, bound) - moment
    return left if left > 0 else None


def record_failures(
    instance: DagsterInstance,
    run_id: str,
    spark: SparkSession,
    sync: SourceSync,
    failures: Mapping[CapturedTable, str],
    updates: Mapping[CapturedTable, TableSync] | None = None,
    *,
    history: bool = False,
) -> dict[CapturedTable, TableSync]:
    """Write ``updates`` and the failed tables' rows (one sync-state write; ``history``: their
    histories failed), then name the failed tables in the run's tag, so the sensor counts the
    failure against them alone; the rows written."""
    moment = now()
    rows = dict(updates or {})
    for table, message in failures.items():
        rows[table] = failed(rows.get(table, sync[table]), message, moment, history=history)
    sync.write(spark, rows)
    if failures:
        # with those an earlier step of the run named (its mirrors, its histories)
        run = instance.get_run_by_id(run_id)
        earlier = run.tags.get(FAILED_TABLES_TAG, "") if run is not None else ""
        named = {n for n in earlier.split(", ") if n} | {t.qualified_name for t in failures}
        names = ", ".join(sorted(named))
        if len(names) > TAG_CHARS:
            names = names[: TAG_CHARS - 3] + "..."
        instance.add_run_tags(run_id, {FAILED_TABLES_TAG: names})
    return rows
