"""Exact and fuzzy snapshots against the emulator, with a concurrent writer.

The property: the snapshot rows are the table at S — the changes with commit LSN <= S are in the
snapshot and those above S are not — so snapshot + changes (replay_from, max] = the final table.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver.catalog import CaptureInstance, discover
from cdc_assets.sqlserver.changes import read_changes
from cdc_assets.sqlserver.errors import (
    KeylessTableNeedsSnapshotIsolation,
    LockTimeout,
    SnapshotIsolationNotAllowed,
)
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn, wait_for_max_lsn
from cdc_assets.sqlserver.snapshot import (
    KeyRange,
    SnapshotResult,
    begin_exact_snapshot,
    rows_query,
    snapshot_table,
)
from cdc_assets_tests.support.replay import replay_keyed

from .conftest import ORDERS_DDL, CdcDatabase

COLUMNS = ["id", "name", "amount"]
ENTRIES_DDL = (
    "CREATE TABLE [dbo].[entries] ([account] int NOT NULL, [seq] int NOT NULL, "
    "[note] nvarchar(20) NULL, CONSTRAINT [pk_entries] PRIMARY KEY ([account], [seq]))"
)
EVENTS_DDL = "CREATE TABLE [dbo].[events] ([kind] varchar(10) NOT NULL, [amount] int NULL)"


def instance_of(db: CdcDatabase, table: str) -> CaptureInstance:
    instance = discover(db.conn)[("dbo", table)].current_instance
    assert instance is not None
    return instance


def as_tuples(batches: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    batches = list(batches)
    if not batches:
        return []
    return [tuple(r[c] for c in columns) for r in pa.Table.from_batches(batches).to_pylist()]


def all_changes(db: CdcDatabase, instance: CaptureInstance) -> list[dict[str, Any]]:
    """Every change row of the instance so far (the table was empty when CDC was enabled)."""
    lsn_range = LsnRange(get_min_lsn(db.conn, instance.name).decrement(), get_max_lsn(db.conn))
    return [r for b in read_changes(db.conn, instance, lsn_range) for r in b.to_pylist()]


@contextmanager
def concurrent_writer(db: CdcDatabase, seed: int = 7) -> Iterator[threading.Event]:
    """A thread committing small multi-statement transactions on its own connection."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        rng = random.Random(seed)
        conn = db.factory.connect()
        live: set[int] = set()
        next_id = 1
        try:
            while not stop.is_set():
                conn.execute("BEGIN TRANSACTION")
                for _ in range(rng.randint(1, 3)):
                    choice = rng.random()
                    if not live or choice < 0.5:
                        conn.execute(
                            "INSERT INTO [dbo].[orders] ([id], [name], [amount]) VALUES (?, ?, ?)",
                            next_id,
                            f"n{next_id}",
                            None,
                        )
                        live.add(next_id)
                        next_id += 1
                    elif choice < 0.8:
                        key = rng.choice(sorted(live))
                        conn.execute(
                            "UPDATE [dbo].[orders] SET [name] = ? WHERE [id] = ?",
                            f"u{rng.randint(0, 99)}",
                            key,
                        )
                    else:
                        key = rng.choice(sorted(live))
                        conn.execute("DELETE FROM [dbo].[orders] WHERE [id] = ?", key)
                        live.discard(key)
                conn.execute("COMMIT TRANSACTION")
                time.sleep(0.002)
        except BaseException as exc:  # surfaced in the test thread
            failures.append(exc)
        finally:
            conn.close()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        time.sleep(0.1)  # let it get going
        yield stop
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not failures, failures


def test_exact_snapshot_with_a_concurrent_writer(orders_db: CdcDatabase) -> None:
    db = orders_db
    instance = instance_of(db, "orders")
    taken: list[tuple[SnapshotResult, list[tuple[Any, ...]]]] = []
    with concurrent_writer(db):
        for _ in range(3):
            with snapshot_table(db.factory, instance, batch_rows=7) as snap:
                assert snap.mode == "exact"
                rows = as_tuples(snap, COLUMNS)
                taken.append((snap.result, rows))
            time.sleep(0.05)
    db.scan()
    changes = all_changes(db, instance)
    final = db.rows("orders", COLUMNS)
    assert len(changes) > 10
    lsns = [result.lsn for result, _ in taken]
    assert lsns == sorted(lsns) and len(set(lsns)) == len(lsns)
    commits = sorted({c["__$start_lsn"] for c in changes})
    assert commits[0] < lsns[0].raw and lsns[-1].raw < commits[-1]  # writes before and after
    for result, rows in taken:
        assert result.mode == "exact" and result.replay_from == result.lsn
        assert result.rows == len(rows)
        assert rows == sorted(rows)  # key order
        s = result.lsn.raw
        at_s = replay_keyed([], [c for c in changes if c["__$start_lsn"] <= s], COLUMNS, ["id"])
        assert sorted(at_s.values()) == rows  # <= S in the snapshot, > S not
        after = replay_keyed(rows, [c for c in changes if c["__$start_lsn"] > s], COLUMNS, ["id"])
        assert sorted(after.values()) == final
    assert wait_for_max_lsn(db.conn, max(r.lsn for r, _ in taken), timeout_s=1) is not None


def replay_idempotent(rows: list[tuple[Any, ...]], changes: list[dict[str, Any]]) -> list[tuple]:
    """Fuzzy replay: upserts and deletes by key, latest version wins, never an error."""
    state = {row[0]: row for row in rows}
    for change in changes:  # already in SQL Server's order
        row = tuple(change[c] for c in COLUMNS)
        if change["__$operation"] == 1:
            state.pop(row[0], None)
        elif change["__$operation"] in (2, 4):
            state[row[0]] = row
    return sorted(state.values())


def test_fuzzy_snapshot_with_a_concurrent_writer(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, snapshot_isolation=False)
    instance = instance_of(db, "orders")
    taken = []
    with concurrent_writer(db, seed=11) as _:
        for _ in range(3):
            db.scan()  # capture keeps up now and then, so L0 moves
            with snapshot_table(db.factory, instance, batch_rows=5) as snap:
                assert snap.mode == "fuzzy"
                rows = as_tuples(snap, COLUMNS)
                taken.append((snap.result, rows))
    db.scan()
    changes = all_changes(db, instance)
    final = db.rows("orders", COLUMNS)
    for result, rows in taken:
        assert result.mode == "fuzzy" and result.replay_from <= result.lsn
        replay = [c for c in changes if c["__$start_lsn"] > result.replay_from.raw]
        assert replay_idempotent(rows, replay) == final


def test_result_only_after_the_read(orders_db: CdcDatabase) -> None:
    instance = instance_of(orders_db, "orders")
    with snapshot_table(orders_db.factory, instance) as snap:
        with pytest.raises(RuntimeError, match="once every batch"):
            _ = snap.result
        assert isinstance(snap.replay_from, Lsn)
    with snapshot_table(orders_db.factory, instance, mode="fuzzy") as snap:
        assert list(snap) == []
        assert snap.result.rows == 0


def test_keyless_table_rules(make_cdc_db: Any) -> None:
    without_si: CdcDatabase = make_cdc_db(EVENTS_DDL, snapshot_isolation=False)
    events = instance_of(without_si, "events")
    with pytest.raises(KeylessTableNeedsSnapshotIsolation, match=r"\[dbo\]\.\[events\]"):
        snapshot_table(without_si.factory, events)
    with pytest.raises(SnapshotIsolationNotAllowed):
        snapshot_table(without_si.factory, events, mode="exact")

    with_si: CdcDatabase = make_cdc_db(EVENTS_DDL)
    with_si.execute(
        "INSERT INTO [dbo].[events] ([kind], [amount]) VALUES ('a', 1), ('a', 1), ('b', NULL)"
    )
    events = instance_of(with_si, "events")
    with snapshot_table(with_si.factory, events) as snap:
        rows = sorted(as_tuples(snap, ["kind", "amount"]), key=repr)
    assert snap.result.mode == "exact" and len(rows) == 3
    with pytest.raises(ValueError, match="without key"):
        rows_query(events, KeyRange(after=("a",)))


def test_key_range_chunks_with_a_composite_key(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ENTRIES_DDL)
    keys = [(a, s) for a in range(1, 4) for s in range(1, 4)]
    for account, seq in keys:
        db.execute(
            "INSERT INTO [dbo].[entries] ([account], [seq], [note]) VALUES (?, ?, ?)",
            account,
            seq,
            f"{account}.{seq}",
        )
    entries = instance_of(db, "entries")
    bounds = [None, (1, 2), (2, 3), (3, 1), None]
    chunks = []
    for after, upto in itertools.pairwise(bounds):
        with snapshot_table(db.factory, entries, key_range=KeyRange(after, upto)) as snap:
            chunks.append([(r[0], r[1]) for r in as_tuples(snap, ["account", "seq", "note"])])
    assert chunks == [keys[:2], keys[2:6], keys[6:7], keys[7:]]
    sql, params = rows_query(entries, KeyRange((1, 2), (3, 1)))
    assert sql == (
        "SELECT [account], [seq], [note] FROM [dbo].[entries] "
        "WHERE (([account] > ?) OR ([account] = ? AND [seq] > ?)) "
        "AND (([account] < ?) OR ([account] = ? AND [seq] <= ?)) ORDER BY [account], [seq]"
    )
    assert params == [1, 1, 2, 3, 3, 1]
    with pytest.raises(ValueError, match="2 values"):
        rows_query(entries, KeyRange(after=(1,)))


def test_one_exact_snapshot_for_several_tables(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, ENTRIES_DDL)
    db.execute("BEGIN TRANSACTION")
    db.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, N'a')")
    db.execute("INSERT INTO [dbo].[entries] ([account], [seq]) VALUES (1, 1)")
    db.execute("COMMIT TRANSACTION")
    orders, entries = instance_of(db, "orders"), instance_of(db, "entries")
    with begin_exact_snapshot(db.factory, [orders, entries]) as snap:
        db.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (2, N'b')")  # after S
        assert as_tuples(snap.read(orders), ["id"]) == [(1,)]
        assert as_tuples(snap.read(entries), ["account", "seq"]) == [(1, 1)]
    db.scan()
    commits = {c["__$start_lsn"] for c in all_changes(db, orders)}
    assert sum(c <= snap.lsn.raw for c in commits) == 1  # the first transaction only


def test_lock_timeout(orders_db: CdcDatabase) -> None:
    db = orders_db
    holder = db.connect()
    holder.execute("BEGIN TRANSACTION")
    holder.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")  # holds the write lock
    try:
        started = time.monotonic()
        with pytest.raises(LockTimeout):
            snapshot_table(db.factory, instance_of(db, "orders"), lock_timeout_ms=200)
        assert time.monotonic() - started < 10
    finally:
        holder.execute("ROLLBACK TRANSACTION")
    with snapshot_table(db.factory, instance_of(db, "orders")) as snap:
        assert list(snap) == []
