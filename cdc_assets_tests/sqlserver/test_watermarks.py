"""What a lock-free, resumable snapshot asks of the source, on a database without snapshot
isolation: log positions (watermarks) that order exactly with the commits around them, the
table's row count estimate, key ranges after a resumed snapshot's last key, and key values
recorded exactly."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver.chunks import estimate_rows, plan_key_ranges
from cdc_assets.sqlserver.key_values import decode_key, encode_key
from cdc_assets.sqlserver.lsn_queries import get_max_lsn
from cdc_assets.sqlserver.snapshot import KeyRange
from cdc_assets.sqlserver.watermarks import log_position

from .conftest import ORDERS_DDL, CdcDatabase
from .test_snapshot import ENTRIES_DDL, EVENTS_DDL, all_changes, instance_of


def _commit_lsns(db: CdcDatabase) -> list[bytes]:
    db.scan()
    return sorted({c["__$start_lsn"] for c in all_changes(db, instance_of(db, "orders"))})


def test_log_positions_without_snapshot_isolation(make_cdc_db: Any) -> None:
    """Each watermark is above every commit before it and below every commit after it; it
    leaves no transaction open and takes no lock (another connection writes at once)."""
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, snapshot_isolation=False)
    reader = db.connect()
    marks = []
    for i in range(3):
        db.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, N'x')", i)
        marks.append(log_position(reader))
        assert reader.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0
    db.execute("UPDATE [dbo].[orders] SET [name] = N'y' WHERE [id] = 0")
    commits = _commit_lsns(db)
    assert len(commits) == 4
    for i, mark in enumerate(marks):  # commit i before mark i, commit i + 1 after it
        assert Lsn.from_bytes(commits[i]) < mark < Lsn.from_bytes(commits[i + 1])
    # capture passes the last mark even when nothing is committed after it
    last = log_position(reader)
    db.scan()
    assert get_max_lsn(db.conn) >= last


def test_row_count_estimate(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, EVENTS_DDL, snapshot_isolation=False)
    for i in range(25):
        db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (?)", i)
    db.execute("DELETE FROM [dbo].[orders] WHERE [id] < 5")
    db.execute("INSERT INTO [dbo].[events] ([kind]) VALUES ('a'), ('a'), ('b')")
    assert estimate_rows(db.conn, "dbo", "orders") == 20
    assert estimate_rows(db.conn, "dbo", "events") == 3  # a heap: index_id 0
    assert estimate_rows(db.conn, "dbo", "nothing") is None
    # the view as SQL Server has it: one row per heap or clustered index of a table
    rows = db.execute(
        "SELECT p.index_id, p.rows FROM sys.partitions AS p WHERE p.object_id = OBJECT_ID(?)",
        "[dbo].[orders]",
    ).fetchall()
    assert [tuple(r) for r in rows] == [(1, 20)]


def test_key_ranges_after_a_key(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ENTRIES_DDL)
    for account in range(1, 5):
        for seq in range(1, 6):
            db.execute("INSERT INTO [dbo].[entries] ([account], [seq]) VALUES (?, ?)", account, seq)
    entries = instance_of(db, "entries")
    # 12 keys above (2, 3), counted: every 4th of them a bound, none on the last key
    ranges = plan_key_ranges(db.conn, entries, 4, after=(2, 3))
    assert ranges == [
        KeyRange((2, 3), (3, 2)),
        KeyRange((3, 2), (4, 1)),
        KeyRange((4, 1), None),
    ]
    # an estimate instead of a count: the same bounds
    assert plan_key_ranges(db.conn, entries, 4, after=(2, 3), rows=12) == ranges
    assert plan_key_ranges(db.conn, entries, 50, after=(4, 5)) == [KeyRange((4, 5), None)]
    with pytest.raises(ValueError, match="without key"):  # nothing to resume after
        plan_key_ranges(db.conn, replace(entries, key_columns=()), 4, after=(1,))


@pytest.mark.parametrize(
    "key",
    [
        (1, "a"),
        (Decimal("10.50"), dt.date(2026, 1, 2)),
        (dt.datetime(2026, 1, 2, 3, 4, 5, 678901), b"\x00\xff"),
        (dt.datetime(2026, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-5))), dt.time(1, 2, 3)),
        (True, 0.1, None, "0C1F7A2E-1111-4C2B-9C3B-000000000000"),
    ],
)
def test_key_values_round_trip_exactly(key: tuple[Any, ...]) -> None:
    back = decode_key(json.loads(json.dumps(encode_key(key))))
    assert back == key and [type(v) for v in back] == [type(v) for v in key]
