"""Range planning capped by a number of transactions (cdc.lsn_time_mapping)."""

from __future__ import annotations

import itertools

import pytest

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.catalog import discover
from cdc_assets.sqlserver.changes import read_changes
from cdc_assets.sqlserver.lsn_queries import get_max_lsn
from cdc_assets.sqlserver.ranges import plan_next_range, range_stats

from .conftest import CdcDatabase


def commit(db: CdcDatabase, count: int, first_id: int = 1) -> None:
    for i in range(first_id, first_id + count):
        db.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, ?)", i, f"n{i}")


def chain(db: CdcDatabase, after: Lsn, max_transactions: int) -> list[LsnRange]:
    ranges: list[LsnRange] = []
    while (next_range := plan_next_range(db.conn, after, max_transactions)) is not None:
        assert not ranges or next_range.follows(ranges[-1])
        ranges.append(next_range)
        after = next_range.hi
    return ranges


def test_ranges_are_capped_by_transactions(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    assert plan_next_range(db.conn, start, 2) is None  # nothing new
    commit(db, 5)
    assert plan_next_range(db.conn, start, 2) is None  # committed, not captured yet
    db.scan()
    ranges = chain(db, start, 2)
    assert [range_stats(db.conn, r).transactions for r in ranges] == [2, 2, 1]
    assert ranges[0].lo == start and ranges[-1].hi == get_max_lsn(db.conn)
    stats = range_stats(db.conn, ranges[0])
    assert stats.first_commit is not None and stats.last_commit is not None
    assert stats.first_commit <= stats.last_commit
    whole = plan_next_range(db.conn, start, 1000)
    assert whole == LsnRange(start, get_max_lsn(db.conn))

    instance = discover(db.conn)[("dbo", "orders")].current_instance
    assert instance is not None
    ids = [
        row["id"]
        for r in ranges
        for batch in read_changes(db.conn, instance, r)
        for row in batch.to_pylist()
    ]
    assert ids == [1, 2, 3, 4, 5]


def test_ranges_follow_capture_lag(orders_db: CdcDatabase) -> None:
    db = orders_db
    cdc_admin.change_job(db.conn, "capture", maxtrans=2)
    start = get_max_lsn(db.conn)
    commit(db, 5)
    ranges: list[LsnRange] = []
    for _ in range(5):  # each scan captures at most 2 transactions of the burst
        db.scan()
        ranges += chain(db, ranges[-1].hi if ranges else start, 10)
    counts = [range_stats(db.conn, r).transactions for r in ranges]
    assert counts == [2, 2, 1]
    assert all(b.follows(a) for a, b in itertools.pairwise(ranges))


def test_bad_cap(orders_db: CdcDatabase) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_next_range(orders_db.conn, Lsn.ZERO, 0)


def test_scan_progress_rows_are_not_transactions(orders_db: CdcDatabase) -> None:
    """The capture job marks log it scanned past without captured changes by a
    ``cdc.lsn_time_mapping`` row with ``tran_id = 0x00``: not a transaction, never counted."""
    db = orders_db
    db.execute("CREATE TABLE [dbo].[untracked] ([id] int NOT NULL PRIMARY KEY)")
    start = get_max_lsn(db.conn)
    for i in range(1, 4):
        commit(db, 1, first_id=i)
        db.scan()
        db.execute("INSERT INTO [dbo].[untracked] ([id]) VALUES (?)", i)
        db.scan()
    progress = db.conn.execute(
        "SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND tran_id = 0x00",
        start.raw,
    ).fetchone()[0]
    assert progress >= 1  # the emulator writes them as SQL Server does
    ranges = chain(db, start, 1)
    assert [range_stats(db.conn, r).transactions for r in ranges] == [1, 1, 1]
    assert ranges[-1].hi < get_max_lsn(db.conn)  # the trailing progress is not an empty range
    assert [range_stats(db.conn, r).transactions for r in chain(db, start, 2)] == [2, 1]
    commit(db, 1, first_id=9)
    db.scan()
    (last,) = chain(db, ranges[-1].hi, 5)  # the next range spans the progress rows
    assert range_stats(db.conn, last).transactions == 1
