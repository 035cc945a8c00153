"""The core promise of the source layer, on random workloads: snapshot at S + changes (S, max]
replayed in plain Python equal the source table — for keyed and keyless tables, across
multi-table transactions, key updates, delete + re-insert, rollbacks and capture lag, with the
changes read range by range as the range planner cuts them."""

from __future__ import annotations

import itertools
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver import (
    SnapshotRead,
    cdc_admin,
    connection_factory,
    discover,
    get_max_lsn,
    plan_next_range,
    read_changes,
    snapshot_table,
)
from cdc_assets_tests.support.replay import replay_keyed, replay_keyed_idempotent, replay_multiset

SCHEMA = [  # after sp_cdc_enable_db; then every table is enabled (net changes when keyed)
    "ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON",
    "CREATE TABLE [dbo].[accounts] ([id] int NOT NULL PRIMARY KEY, [owner] nvarchar(40) NULL, "
    "[balance] decimal(12,2) NOT NULL)",
    "CREATE TABLE [dbo].[entries] ([account] int NOT NULL, [seq] int NOT NULL, "
    "[note] varchar(20) NULL, CONSTRAINT [pk_entries] PRIMARY KEY ([account], [seq]))",
    "CREATE TABLE [dbo].[events] ([kind] varchar(10) NOT NULL, [amount] int NULL)",
]

TABLES: dict[str, tuple[list[str], list[str]]] = {
    "accounts": (["id", "owner", "balance"], ["id"]),
    "entries": (["account", "seq", "note"], ["account", "seq"]),
    "events": (["kind", "amount"], []),
}

owners = st.one_of(st.none(), st.text("abcé漢 ", min_size=0, max_size=8))
balances = st.decimals(min_value=-9999, max_value=9999, places=2).map(
    lambda d: d.quantize(Decimal("0.01"))
)
notes = st.one_of(st.none(), st.text("xyz", max_size=5))


class Model:
    """What the tables hold, kept beside the database to draw valid statements."""

    def __init__(self) -> None:
        self.accounts: dict[int, tuple[Any, ...]] = {}
        self.entries: set[tuple[int, int]] = set()
        self.events: Counter[tuple[str, int | None]] = Counter()


def draw_statement(data: st.DataObject, model: Model) -> tuple[str, tuple[Any, ...]]:
    """One valid DML statement against the model (the model is updated as if it committed)."""
    choices = ["insert_account", "insert_entry", "insert_event"]
    if model.accounts:
        choices += ["update_account", "delete_account", "rekey_account"]
    if model.entries:
        choices += ["update_entry", "delete_entry"]
    if model.events:
        choices += ["delete_event", "update_event"]
    kind = data.draw(st.sampled_from(choices))
    if kind == "insert_account":
        key = data.draw(st.integers(1, 60).filter(lambda k: k not in model.accounts))
        row = (key, data.draw(owners), data.draw(balances))
        model.accounts[key] = row
        return "INSERT INTO [dbo].[accounts] ([id], [owner], [balance]) VALUES (?, ?, ?)", row
    if kind == "update_account":
        key = data.draw(st.sampled_from(sorted(model.accounts)))
        balance = data.draw(balances)
        model.accounts[key] = (*model.accounts[key][:2], balance)
        return "UPDATE [dbo].[accounts] SET [balance] = ? WHERE [id] = ?", (balance, key)
    if kind == "delete_account":
        key = data.draw(st.sampled_from(sorted(model.accounts)))
        del model.accounts[key]
        return "DELETE FROM [dbo].[accounts] WHERE [id] = ?", (key,)
    if kind == "rekey_account":
        old = data.draw(st.sampled_from(sorted(model.accounts)))
        new = data.draw(st.integers(61, 120).filter(lambda k: k not in model.accounts))
        model.accounts[new] = (new, *model.accounts.pop(old)[1:])
        return "UPDATE [dbo].[accounts] SET [id] = ? WHERE [id] = ?", (new, old)
    if kind == "insert_entry":
        key = data.draw(
            st.tuples(st.integers(1, 5), st.integers(1, 9)).filter(lambda k: k not in model.entries)
        )
        model.entries.add(key)
        return (
            "INSERT INTO [dbo].[entries] ([account], [seq], [note]) VALUES (?, ?, ?)",
            (*key, data.draw(notes)),
        )
    if kind == "update_entry":
        key = data.draw(st.sampled_from(sorted(model.entries)))
        return (
            "UPDATE [dbo].[entries] SET [note] = ? WHERE [account] = ? AND [seq] = ?",
            (data.draw(notes), *key),
        )
    if kind == "delete_entry":
        key = data.draw(st.sampled_from(sorted(model.entries)))
        model.entries.discard(key)
        return "DELETE FROM [dbo].[entries] WHERE [account] = ? AND [seq] = ?", key
    if kind == "insert_event":
        amount = data.draw(st.none() | st.integers(0, 3))
        row = (data.draw(st.sampled_from(["a", "b", "c"])), amount)
        model.events[row] += 1
        return "INSERT INTO [dbo].[events] ([kind], [amount]) VALUES (?, ?)", row
    # events are a multiset: statements touch every equal row, as SQL Server would
    row = data.draw(st.sampled_from(sorted(model.events, key=repr)))
    count = model.events.pop(row)
    if kind == "update_event":
        new = (row[0], 9)
        model.events[new] += count
        if row[1] is None:
            return "UPDATE [dbo].[events] SET [amount] = 9 WHERE [kind] = ? AND [amount] IS NULL", (
                row[0],
            )
        return "UPDATE [dbo].[events] SET [amount] = 9 WHERE [kind] = ? AND [amount] = ?", row
    if row[1] is None:
        return "DELETE FROM [dbo].[events] WHERE [kind] = ? AND [amount] IS NULL", (row[0],)
    return "DELETE FROM [dbo].[events] WHERE [kind] = ? AND [amount] = ?", row


def run_transactions(conn: Any, data: st.DataObject, model: Model, count: int) -> None:
    """``count`` transactions of 1-4 statements; about one in six rolls back."""
    for _ in range(count):
        rollback = data.draw(st.integers(0, 5)) == 0
        saved = (dict(model.accounts), set(model.entries), Counter(model.events))
        conn.execute("BEGIN TRANSACTION")
        for _ in range(data.draw(st.integers(1, 4))):
            conn.execute(*draw_statement(data, model))
        if rollback:
            conn.execute("ROLLBACK TRANSACTION")
            model.accounts, model.entries, model.events = saved
        else:
            conn.execute("COMMIT TRANSACTION")
        if data.draw(st.integers(0, 3)) == 0:  # capture lags: scan only now and then
            cdc_admin.scan(conn)


def source_rows(conn: Any, table: str) -> list[tuple[Any, ...]]:
    columns = ", ".join(f"[{c}]" for c in TABLES[table][0])
    return [tuple(r) for r in conn.execute(f"SELECT {columns} FROM [dbo].[{table}]").fetchall()]


def new_database(tmp_path: Path) -> tuple[Path, Any]:
    path = tmp_path / f"src_{next(_counter)}.db"
    conn = emulator.connect(str(path), autocommit=True)
    cdc_admin.enable_database(conn)
    for statement in SCHEMA:
        conn.execute(statement)
    for table, (_, key) in TABLES.items():
        cdc_admin.enable_table(conn, "dbo", table, supports_net_changes=bool(key))
    return path, conn


_counter = itertools.count()


def catch_up(conn: Any) -> Lsn:
    """Scan until capture has everything committed; the max LSN it reached."""
    cdc_admin.scan(conn, maxtrans=100000, maxscans=100)
    return get_max_lsn(conn)


def changes_by_range(
    conn: Any, instances: dict[str, Any], after: Lsn, max_transactions: int
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Every change above ``after``, read range by range as the planner cuts them; each range
    must continue the previous one."""
    changes: dict[str, list[dict[str, Any]]] = {table: [] for table in instances}
    ranges = 0
    while (lsn_range := plan_next_range(conn, after, max_transactions)) is not None:
        assert lsn_range.lo == after
        for table, instance in instances.items():
            for batch in read_changes(conn, instance, lsn_range, batch_rows=7):
                rows = batch.to_pylist()
                assert all(after < Lsn.from_bytes(r["__$start_lsn"]) <= lsn_range.hi for r in rows)
                changes[table].extend(rows)
        after = lsn_range.hi
        ranges += 1
    return changes, ranges


def read_snapshot(read: SnapshotRead, interleave: Any) -> list[tuple[Any, ...]]:
    """All rows of a snapshot, calling ``interleave()`` between batches (writes that race it)."""
    rows: list[tuple[Any, ...]] = []
    for batch in read:
        rows.extend(tuple(r.values()) for r in batch.to_pylist())
        interleave()
    return rows


def expected_state(table: str, rows: list[tuple[Any, ...]]) -> Any:
    columns, keys = TABLES[table]
    if not keys:
        return Counter(rows)
    return {tuple(r[columns.index(k)] for k in keys): r for r in rows}


@pytest.mark.parametrize("mode", ["exact", "fuzzy"])
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_snapshot_plus_ranges_equals_source(tmp_path: Path, mode: str, data: st.DataObject) -> None:
    path, conn = new_database(tmp_path)
    model = Model()
    run_transactions(conn, data, model, data.draw(st.integers(0, 12), label="before snapshot"))
    catch_up(conn)  # a new capture instance has no start LSN until the first scan
    instances = {table: t.current_instance for (_, table), t in discover(conn).items()}
    factory = connection_factory(EmulatorSettings(path=path))
    tables = list(TABLES) if mode == "exact" else ["accounts", "entries"]  # fuzzy needs a key

    snapshots: dict[str, list[tuple[Any, ...]]] = {}
    replay_from: dict[str, Lsn] = {}
    for table in tables:
        read = snapshot_table(factory, instances[table], mode=mode, batch_rows=3)
        snapshots[table] = read_snapshot(
            read, lambda: run_transactions(conn, data, model, data.draw(st.integers(0, 2)))
        )
        assert read.result.mode == mode
        assert read.result.rows == len(snapshots[table])
        replay_from[table] = read.result.replay_from

    run_transactions(conn, data, model, data.draw(st.integers(0, 12), label="after snapshot"))
    catch_up(conn)
    max_transactions = data.draw(st.integers(1, 4), label="max transactions per range")
    start = min(replay_from.values())
    changes, _ = changes_by_range(conn, {t: instances[t] for t in tables}, start, max_transactions)

    for table in tables:
        columns, keys = TABLES[table]
        mine = [c for c in changes[table] if Lsn.from_bytes(c["__$start_lsn"]) > replay_from[table]]
        if not keys:
            replayed: Any = replay_multiset(snapshots[table], mine, columns)
        elif mode == "exact":
            replayed = replay_keyed(snapshots[table], mine, columns, keys)
        else:
            replayed = replay_keyed_idempotent(snapshots[table], mine, columns, keys)
        assert replayed == expected_state(table, source_rows(conn, table)), table


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_ranges_hold_at_most_max_transactions_and_tile_the_log(
    tmp_path: Path, data: st.DataObject
) -> None:
    _, conn = new_database(tmp_path)
    model = Model()
    start = catch_up(conn)
    run_transactions(conn, data, model, data.draw(st.integers(1, 15)))
    catch_up(conn)
    max_transactions = data.draw(st.integers(1, 5))
    committed = [
        Lsn.from_bytes(r[0])
        for r in conn.execute(
            "SELECT start_lsn FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND tran_id <> 0x00 "
            "ORDER BY start_lsn",
            start.raw,
        ).fetchall()
    ]
    after, covered = start, 0
    while (lsn_range := plan_next_range(conn, after, max_transactions)) is not None:
        inside = [lsn for lsn in committed if lsn_range.lo < lsn <= lsn_range.hi]
        assert 1 <= len(inside) <= max_transactions
        covered += len(inside)
        after = lsn_range.hi
    assert covered == len(committed)  # contiguous ranges from start hold every transaction
    assert after == (committed[-1] if committed else start)
