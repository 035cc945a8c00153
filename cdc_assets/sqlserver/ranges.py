"""Cutting the change log into LSN ranges ``(lo, hi]`` (DESIGN.md section 4).

The next range after ``lo`` closes at the max LSN, or earlier at the commit LSN of the N-th
transaction after ``lo`` when more are waiting: ``cdc.lsn_time_mapping`` has one row per captured
transaction (plus rows with ``tran_id = 0x00`` that the capture job writes to mark scan progress
while idle; those are not transactions and are not counted), so
``OFFSET N-1 ROWS FETCH NEXT 1 ROWS ONLY`` finds that LSN in one indexed query. This bounds the
work of one range when a burst arrives. The planner sends no query per transaction and keeps no
state: the chain lives in the partition keys.

https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-lsn-time-mapping-transact-sql
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from cdc_assets.lsn import Lsn, LsnRange

from .dbapi import DbapiConnection, fetch_all, fetch_value
from .health import get_server_time
from .lsn_queries import get_max_lsn, map_time_to_lsn

__all__ = [
    "RangeStats",
    "committed_before",
    "last_transaction_lsn",
    "plan_next_range",
    "range_stats",
    "transaction_commits",
]

# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-lsn-time-mapping-transact-sql
NTH_TRANSACTION_QUERY = """
SELECT start_lsn FROM cdc.lsn_time_mapping
WHERE start_lsn > ? AND start_lsn <= ? AND tran_id <> 0x00
ORDER BY start_lsn OFFSET ? ROWS FETCH NEXT 1 ROWS ONLY
"""


def plan_next_range(
    conn: DbapiConnection, after: Lsn, max_transactions: int, *, maximum: Lsn | None = None
) -> LsnRange | None:
    """The range ``(after, hi]`` holding at most ``max_transactions`` transactions, ``hi`` at most
    the max LSN (``maximum`` if the caller has just read it); None when no transaction was
    captured above ``after`` (the max LSN may still have moved over scan-progress rows: such a
    range would be empty and is not planned)."""
    if max_transactions < 1:
        raise ValueError(f"max_transactions must be at least 1; got {max_transactions}")
    if maximum is None:
        maximum = get_max_lsn(conn)
    if maximum <= after:
        return None
    nth = fetch_value(conn, NTH_TRANSACTION_QUERY, after.raw, maximum.raw, max_transactions - 1)
    if nth is not None:
        return LsnRange(after, Lsn.from_bytes(nth))
    if max_transactions > 1 and fetch_value(conn, NTH_TRANSACTION_QUERY, after.raw, maximum.raw, 0):
        return LsnRange(after, maximum)
    return None


@dataclass(frozen=True)
class RangeStats:
    """What ``cdc.lsn_time_mapping`` says about a range (commit times are server local time)."""

    transactions: int
    first_commit: dt.datetime | None
    last_commit: dt.datetime | None


RANGE_STATS_QUERY = """
SELECT COUNT(*) AS n, MIN(tran_end_time) AS first_commit, MAX(tran_end_time) AS last_commit
FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND start_lsn <= ? AND tran_id <> 0x00
"""


def range_stats(conn: DbapiConnection, lsn_range: LsnRange) -> RangeStats:
    """Transactions and commit-time span of ``(lo, hi]`` (0 transactions: an empty range)."""
    ((count, first, last),) = fetch_all(conn, RANGE_STATS_QUERY, lsn_range.lo.raw, lsn_range.hi.raw)
    return RangeStats(int(count), first, last)


# Rows with tran_id 0x00 mark the capture job's scan progress, not transactions.
LAST_TRANSACTION_QUERY = "SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00"


def last_transaction_lsn(conn: DbapiConnection) -> Lsn | None:
    """The commit LSN of the newest captured transaction; None before the first one."""
    value = fetch_value(conn, LAST_TRANSACTION_QUERY)
    return None if value is None else Lsn.from_bytes(value)


COMMITS_QUERY = """
SELECT start_lsn, tran_end_time FROM cdc.lsn_time_mapping
WHERE start_lsn > ? AND tran_id <> 0x00 ORDER BY start_lsn
"""


def transaction_commits(conn: DbapiConnection, after: Lsn) -> list[tuple[Lsn, dt.datetime]]:
    """Commit LSN and commit time (server local time) of every captured transaction above
    ``after``, in LSN order."""
    return [(Lsn.from_bytes(lsn), when) for lsn, when in fetch_all(conn, COMMITS_QUERY, after.raw)]


def committed_before(conn: DbapiConnection, seconds: float) -> Lsn | None:
    """The commit LSN of the last transaction committed at least ``seconds`` ago by the server's
    clock (so the two clocks need not agree); None when there is none. Two queries."""
    now = get_server_time(conn)
    if now is None:
        return None
    return map_time_to_lsn(conn, now - dt.timedelta(seconds=seconds))
