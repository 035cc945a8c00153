"""What a change-log range partition is published with, asked of the source after its rows are
read: rows per operation (counted by the source, no Spark job), the range's commit times and
lag, the columns the capture instance lacks, and the validity interval after the read that proves
cleanup removed none of the rows read (:class:`~cdc_assets.records.Coverage`)."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from cdc_assets.lsn import OPERATION_NAMES, LsnRange
from cdc_assets.records import Coverage, RangeProperties

from .catalog import CaptureInstance, get_source_columns
from .changes import count_changes_unchecked
from .dbapi import DbapiConnection
from .health import get_server_time
from .lsn_queries import get_max_lsn, get_min_lsn
from .ranges import range_stats


class RangeTimes:
    """The range's transactions, first and last commit time and lag (kept with a range): the
    same for every table of the run, so asked of the source once, by the first table that needs
    them (on that thread's connection), not once per changed table."""

    def __init__(self, lsn_range: LsnRange) -> None:
        self._range = lsn_range
        self._lock = threading.Lock()
        self._times: dict[str, Any] | None = None

    def get(self, conn: DbapiConnection) -> dict[str, Any]:
        with self._lock:
            if self._times is None:
                stats = range_stats(conn, self._range)
                last = stats.last_commit
                now = get_server_time(conn) or dt.datetime.now()
                self._times = {
                    "transactions": stats.transactions,
                    "first_commit": stats.first_commit.isoformat() if stats.first_commit else None,
                    "last_commit": last.isoformat() if last else None,
                    "lag_seconds": (now - last).total_seconds() if last else None,
                }
            return dict(self._times)


def range_facts(
    conn: DbapiConnection,
    instance: CaptureInstance,
    table: tuple[str, str],
    lsn_range: LsnRange,
    read_range: LsnRange | None,
    times: RangeTimes,
    *,
    empty: bool,
) -> RangeProperties:
    """The properties of ``table``'s (schema, name) range ``lsn_range`` whose rows above its
    snapshot (``read_range``; None: the snapshot covers it) were just read (``empty``: none
    were), asked of the source now: after the read, so the coverage it records is proof."""
    counts = (
        {} if empty or read_range is None else count_changes_unchecked(conn, instance, read_range)
    )
    operations = {OPERATION_NAMES.get(op, str(op)): n for op, n in counts.items()}
    # After the rows are read, the range must still lie in the validity interval: if cleanup
    # moved the min LSN past lo + 1 during the read, rows may be missing.
    minimum = get_min_lsn(conn, instance.name)
    maximum = get_max_lsn(conn)
    reasons = []
    if read_range is not None and minimum > read_range.first:
        reasons.append(
            f"cleanup moved the min LSN of {instance.name} to {minimum.hex}, above lo + 1 = "
            f"{read_range.first.hex}: changes of this range may have been removed"
        )
    if lsn_range.hi > maximum:
        reasons.append(f"hi {lsn_range.hi.hex} is above the max LSN {maximum.hex}")
    captured = set(instance.column_names) | set(instance.excluded_columns)
    not_captured = [c.name for c in get_source_columns(conn, *table) if c.name not in captured]
    read = times.get(conn)
    return RangeProperties(
        lsn_range=lsn_range,
        capture_instance=instance.name,
        # The table's snapshot holds the changes up to its replay LSN: only those above it are
        # read (none when it covers the whole range, e.g. after a re-snapshot).
        read_from=read_range.lo if read_range is not None else lsn_range.hi,
        rows=sum(operations.values()),
        operations=operations,
        transactions=read["transactions"],
        first_commit=read["first_commit"],
        last_commit=read["last_commit"],
        lag_seconds=read["lag_seconds"],
        read_at=dt.datetime.now(dt.UTC).isoformat(),
        columns_not_captured=tuple(not_captured),
        coverage=Coverage(
            ok=not reasons, min_lsn=minimum, max_lsn=maximum, reason="; ".join(reasons)
        ),
    )
