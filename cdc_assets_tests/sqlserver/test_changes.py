"""Change reads against the emulator: order, batching, key updates, validity checks, error 313."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.catalog import CaptureInstance, discover
from cdc_assets.sqlserver.changes import (
    change_schema,
    count_changes,
    read_changes,
    read_function_changes,
)
from cdc_assets.sqlserver.errors import LsnNotAvailable
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn

from .conftest import CdcDatabase


def orders_instance(db: CdcDatabase) -> CaptureInstance:
    instance = discover(db.conn)[("dbo", "orders")].current_instance
    assert instance is not None
    return instance


def rows_of(batches: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(batches)).to_pylist() if batches else []


def workload(db: CdcDatabase) -> None:
    """Three transactions: a multi-statement one, a key update, a delete."""
    db.execute("BEGIN TRANSACTION")
    db.execute(
        "INSERT INTO [dbo].[orders] ([id], [name], [amount]) VALUES (?, ?, ?), (?, ?, ?)",
        1,
        "a",
        Decimal("1.50"),
        2,
        "b",
        None,
    )
    db.execute("UPDATE [dbo].[orders] SET [name] = ? WHERE [id] = ?", "bb", 2)
    db.execute("COMMIT TRANSACTION")
    db.execute("UPDATE [dbo].[orders] SET [id] = ? WHERE [id] = ?", 10, 1)  # key update
    db.execute("DELETE FROM [dbo].[orders] WHERE [id] = ?", 2)
    db.scan()


def test_read_changes_in_order_and_in_batches(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    workload(db)
    instance = orders_instance(db)
    lsn_range = LsnRange(start, get_max_lsn(db.conn))
    batches = list(read_changes(db.conn, instance, lsn_range, batch_rows=2))
    assert [b.num_rows for b in batches] == [2, 2, 2, 1]
    assert all(b.schema == change_schema(instance).schema for b in batches)
    rows = rows_of(batches)
    order = [
        (r["__$start_lsn"], r["__$command_id"], r["__$seqval"], r["__$operation"]) for r in rows
    ]
    assert order == sorted(order)
    assert [(r["__$operation"], r["id"], r["name"]) for r in rows] == [
        (2, 1, "a"),  # transaction 1: insert, insert, update before/after
        (2, 2, "b"),
        (3, 2, "b"),
        (4, 2, "bb"),
        (1, 1, "a"),  # transaction 2: a key update is a delete then an insert
        (2, 10, "a"),
        (1, 2, "bb"),  # transaction 3: a delete
    ]
    assert len({r["__$start_lsn"] for r in rows[:4]}) == 1  # one transaction, one commit LSN
    assert rows[0]["amount"] == Decimal("1.50")
    assert all(isinstance(r["__$commit_time"], dt.datetime) for r in rows)
    assert all(start < Lsn.from_bytes(r["__$start_lsn"]) <= lsn_range.hi for r in rows)


def test_ranges_partition_the_changes(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    workload(db)
    instance = orders_instance(db)
    top = get_max_lsn(db.conn)
    whole = rows_of(read_changes(db.conn, instance, LsnRange(start, top)))
    commits = sorted({r["__$start_lsn"] for r in whole})
    middle = Lsn.from_bytes(commits[0])
    first = rows_of(read_changes(db.conn, instance, LsnRange(start, middle)))
    second = rows_of(read_changes(db.conn, instance, LsnRange(middle, top)))
    assert first + second == whole and len(first) == 4
    assert count_changes(db.conn, instance, LsnRange(start, top)) == {1: 2, 2: 3, 3: 1, 4: 1}


def test_range_above_max_lsn_is_not_available(orders_db: CdcDatabase) -> None:
    db = orders_db
    top = get_max_lsn(db.conn)
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")  # committed, not yet captured
    with pytest.raises(LsnNotAvailable, match="not reached") as info:
        list(read_changes(db.conn, orders_instance(db), LsnRange(top, top.increment())))
    assert info.value.maximum == top


def cleanup_below(db: CdcDatabase, instance: str, low_water_mark: Lsn) -> None:
    cdc_admin.cleanup_change_table(db.conn, instance, low_water_mark, threshold=5000)


def test_cleanup_makes_the_range_unavailable(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    workload(db)
    instance = orders_instance(db)
    top = get_max_lsn(db.conn)
    cleanup_below(db, "dbo_orders", top)
    minimum = get_min_lsn(db.conn, "dbo_orders")
    assert minimum > start.increment()
    with pytest.raises(LsnNotAvailable, match="cleanup") as info:
        list(read_changes(db.conn, instance, LsnRange(start, top)))
    assert info.value.minimum == minimum and info.value.capture_instance == "dbo_orders"
    assert "re-snapshot" in info.value.hint
    # the query functions refuse the same range with error 313, mapped with the interval
    with pytest.raises(LsnNotAvailable) as info:
        list(read_function_changes(db.conn, instance, LsnRange(start, top)))
    assert info.value.native_error == 313
    assert info.value.minimum == minimum and info.value.maximum == top
    # what is left is still readable
    left = rows_of(read_changes(db.conn, instance, LsnRange(minimum.decrement(), top)))
    assert {Lsn.from_bytes(r["__$start_lsn"]) for r in left} == {top}


def test_cleanup_during_the_read_fails_the_read(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    workload(db)
    instance = orders_instance(db)
    top = get_max_lsn(db.conn)
    batches = read_changes(db.conn, instance, LsnRange(start, top), batch_rows=1)
    next(batches)
    cleanup_below(db, "dbo_orders", top)
    with pytest.raises(LsnNotAvailable, match="while the range was being read"):
        list(batches)


def test_query_functions(orders_db: CdcDatabase) -> None:
    db = orders_db
    start = get_max_lsn(db.conn)
    workload(db)
    instance = orders_instance(db)
    lsn_range = LsnRange(start, get_max_lsn(db.conn))
    all_rows = rows_of(read_function_changes(db.conn, instance, lsn_range))
    assert [r["__$operation"] for r in all_rows] == [2, 2, 4, 1, 2, 1]
    assert "__$command_id" not in all_rows[0]
    old = rows_of(read_function_changes(db.conn, instance, lsn_range, row_filter="all update old"))
    assert [r["__$operation"] for r in old] == [2, 2, 3, 4, 1, 2, 1]
    net = rows_of(read_function_changes(db.conn, instance, lsn_range, kind="net"))
    assert [(r["__$operation"], r["id"]) for r in net] == [(2, 10)]
    with pytest.raises(ValueError):
        list(read_function_changes(db.conn, instance, lsn_range, row_filter="all with merge"))
