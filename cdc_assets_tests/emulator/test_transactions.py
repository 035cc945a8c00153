"""Transactions, commit LSNs, isolation, locks and use from several threads and processes."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets.lsn import Lsn

from .conftest import ORDERS_DDL, change_rows, enable_cdc

BEGIN_LSN_SQL = """
SELECT dt.database_transaction_begin_lsn
FROM sys.dm_tran_database_transactions AS dt
JOIN sys.dm_tran_current_transaction AS cur ON cur.transaction_id = dt.transaction_id
WHERE dt.database_id = DB_ID()
"""


def _commit_lsns(conn: Connection) -> list[bytes]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT start_lsn FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 ORDER BY start_lsn"
        )
    ]


def test_commit_lsns_are_assigned_at_commit(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    first = connect(autocommit=False)
    second = connect(autocommit=False)
    first.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")  # first to write...
    first.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
    first.commit()
    second.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (3)")
    second.commit()
    first.execute("UPDATE [dbo].[orders] SET [qty] = 1 WHERE [id] = 1")
    first.commit()
    emulator.scan(db_path)
    rows = change_rows(orders)
    by_id = {(r.id, r[3]): r[0] for r in rows}
    assert by_id[(1, 2)] == by_id[(2, 2)] < by_id[(3, 2)] < by_id[(1, 4)]
    lsns = _commit_lsns(orders)
    assert lsns == sorted(set(lsns)) and len(lsns) == 3
    assert first.last_commit_lsn == lsns[-1]
    times = [
        r[0]
        for r in orders.execute("SELECT tran_end_time FROM cdc.lsn_time_mapping ORDER BY start_lsn")
    ]
    assert times == sorted(times)


def test_rolled_back_work_never_appears(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    implicit = connect(autocommit=False)
    implicit.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    implicit.rollback()
    orders.execute("BEGIN TRANSACTION")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
    orders.execute("SAVE TRANSACTION sp1")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (3)")
    orders.execute("ROLLBACK TRANSACTION sp1")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (4)")
    orders.execute("COMMIT")
    orders.execute("BEGIN TRAN")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (5)")
    orders.execute("ROLLBACK")
    with pytest.raises(emulator.IntegrityError):
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (6), (2)")  # statement rolls back
    emulator.scan(db_path)
    assert sorted(r.id for r in change_rows(orders)) == [2, 4]
    assert [r[0] for r in orders.execute("SELECT id FROM dbo.orders ORDER BY id")] == [2, 4]
    with pytest.raises(emulator.ProgrammingError, match=r"\(3902\)"):
        orders.execute("COMMIT")
    with pytest.raises(emulator.ProgrammingError, match=r"\(3903\)"):
        orders.execute("ROLLBACK TRANSACTION")


def test_savepoints_keep_the_transaction_open(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    """As in SQL Server: ROLLBACK TRAN <savepoint> undoes the work after it and keeps the
    transaction open with @@TRANCOUNT unchanged; savepoints nest and repeat (the latest of a name
    wins); a rollback to an unknown name is 6401 and leaves the transaction as it was;
    ROLLBACK TRAN <the transaction's name> ends it; the capture job sees only what committed."""
    jdbc = connect(autocommit=False)  # mssql-jdbc's setSavepoint(name), autocommit off
    jdbc.execute(
        "IF @@TRANCOUNT = 0 BEGIN BEGIN TRAN IF @@TRANCOUNT = 2 COMMIT TRAN END SAVE TRAN [jdbc_sp]"
    )
    assert jdbc.trancount == 1
    jdbc.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    jdbc.execute("ROLLBACK TRAN [jdbc_sp]")
    jdbc.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
    jdbc.commit()
    orders.execute("BEGIN TRAN outer_tx")
    orders.execute("BEGIN TRAN")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (3)")
    orders.execute("SAVE TRAN a")
    orders.execute("UPDATE [dbo].[orders] SET [qty] = 1 WHERE [id] = 3")
    orders.execute("SAVE TRAN b")
    orders.execute("DELETE FROM [dbo].[orders] WHERE [id] = 3")
    orders.execute("SAVE TRAN a")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (4)")
    orders.execute("ROLLBACK TRAN a")  # the latest a: the delete stays
    assert [r[0] for r in orders.execute("SELECT id FROM dbo.orders ORDER BY id")] == [2]
    orders.execute("ROLLBACK TRANSACTION b")  # the delete is undone, the update stays
    assert orders.execute("SELECT qty FROM dbo.orders WHERE id = 3").fetchone()[0] == 1
    assert orders.execute("SELECT @@TRANCOUNT").fetchone()[0] == 2
    with pytest.raises(emulator.ProgrammingError, match=r"Cannot roll back nosuch.*\(6401\)"):
        orders.execute("ROLLBACK TRAN nosuch")
    assert orders.trancount == 2
    orders.execute("COMMIT")
    orders.execute("COMMIT")
    orders.execute("BEGIN TRAN named")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (5)")
    orders.execute("ROLLBACK TRAN named")
    assert orders.trancount == 0
    emulator.scan(db_path)
    changes = [(r.id, getattr(r, "__$operation"), r.qty) for r in change_rows(orders)]
    assert changes == [(2, 2, None), (3, 2, None), (3, 3, None), (3, 4, 1)]
    assert [r[0] for r in orders.execute("SELECT id FROM dbo.orders ORDER BY id")] == [2, 3]


def test_nested_and_implicit_transactions(connect: Callable[..., Connection]) -> None:
    conn = connect(autocommit=False)
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    conn.commit()
    conn.execute("BEGIN TRAN")
    conn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 2
    conn.execute("COMMIT")
    other = connect()
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0  # still open
    conn.commit()
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1
    conn.autocommit = True
    conn.execute("INSERT INTO t VALUES (2)")
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 2


def test_trancount_attribute_is_trancount(connect: Callable[..., Connection]) -> None:
    """``Connection.trancount`` (what the TDS server reads to report transactions) is
    ``@@TRANCOUNT``: implicit and nested transactions, COMMIT, ROLLBACK, a failed statement."""
    conn = connect(autocommit=False)

    def both() -> tuple[int, int]:
        count = conn.trancount  # read first: the SELECT below opens nothing (no table)
        return count, conn.execute("SELECT @@TRANCOUNT").fetchone()[0]

    assert both() == (0, 0)
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    assert both() == (1, 1)
    conn.execute("BEGIN TRAN")
    assert both() == (2, 2)
    conn.execute("COMMIT")
    assert both() == (1, 1)
    conn.commit()
    assert both() == (0, 0)
    with pytest.raises(emulator.DatabaseError):
        conn.execute("INSERT INTO t VALUES (1), (1)")
    assert both() == (1, 1)  # the implicit transaction stays open, as in SQL Server
    conn.rollback()
    assert both() == (0, 0)
    conn.autocommit = True
    conn.execute("INSERT INTO t VALUES (2)")
    assert both() == (0, 0)
    conn.execute("BEGIN TRAN")
    assert both() == (1, 1)
    conn.execute("ROLLBACK")
    assert both() == (0, 0)


def test_read_committed_reads_see_new_commits(connect: Callable[..., Connection]) -> None:
    reader = connect(autocommit=False)
    writer = connect()
    writer.execute("CREATE TABLE t (id int PRIMARY KEY)")
    assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    writer.execute("INSERT INTO t VALUES (1)")
    assert reader.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1  # same implicit txn


def test_snapshot_requires_allow_snapshot_isolation(conn: Connection) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    conn.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    conn.execute("BEGIN TRANSACTION")
    with pytest.raises(emulator.Error, match=r"\(3952\)"):
        conn.execute("SELECT COUNT(*) FROM t")
    conn.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    conn.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    assert (
        conn.execute(
            "SELECT snapshot_isolation_state_desc FROM sys.databases WHERE database_id = DB_ID()"
        ).fetchone()[0]
        == "ON"
    )


def test_exact_snapshot_lsn(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    """The contract's snapshot: S splits commits into visible (<= S) and not visible (> S)."""
    orders.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a'), (2, 'b')")
    orders.execute("UPDATE [dbo].[orders] SET [name] = 'bb' WHERE [id] = 2")
    locker, snap = connect(), connect()
    locker.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    locker.execute("BEGIN TRANSACTION")
    locker.execute("SELECT TOP (0) 1 AS locked FROM [dbo].[orders] WITH (TABLOCKX, HOLDLOCK)")

    writer_done = threading.Event()

    def write_after_snapshot() -> None:
        writer = connect(timeout=10)
        writer.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (3, 'late')")
        writer.execute("DELETE FROM [dbo].[orders] WHERE [id] = 1")
        writer_done.set()

    thread = threading.Thread(target=write_after_snapshot)
    thread.start()
    time.sleep(0.3)
    assert not writer_done.is_set()  # TABLOCKX blocks the writer
    snap.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    snap.execute("BEGIN TRANSACTION")
    snap.execute("SELECT TOP (1) object_id FROM cdc.change_tables")
    snap.execute("SAVE TRANSACTION cdc_assets_snapshot")
    (begin_lsn,) = snap.execute(BEGIN_LSN_SQL).fetchone()
    assert isinstance(begin_lsn, Decimal)
    locker.execute("ROLLBACK TRANSACTION")
    thread.join(10)
    assert writer_done.is_set()
    visible = snap.execute("SELECT [id], [name] FROM [dbo].[orders] ORDER BY [id]").fetchall()
    chunk = snap.execute(
        "SELECT [id], [name] FROM [dbo].[orders] WHERE [id] > ? ORDER BY [id]", 1
    ).fetchall()
    snap.execute("COMMIT TRANSACTION")
    snap.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    assert [tuple(r) for r in visible] == [(1, "a"), (2, "bb")] and [tuple(r) for r in chunk] == [
        (2, "bb")
    ]

    s = Lsn.from_numeric(begin_lsn).raw
    emulator.scan(db_path)
    state: dict[int, str] = {}
    for row in change_rows(orders):
        if row[0] > s:
            assert row.id in (1, 3)  # the late writer's changes only
            continue
        if row[3] in (2, 4):
            state[row.id] = row.name
        elif row[3] == 1:
            state.pop(row.id)
    assert state == {1: "a", 2: "bb"}
    lsns = _commit_lsns(orders)
    assert [lsn <= s for lsn in lsns] == [True] * (len(lsns) - 2) + [False, False]


def test_tablockx_times_out_with_1222(conn: Connection, connect: Callable[..., Connection]) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY)")
    conn.execute("BEGIN TRAN")
    conn.execute("SELECT TOP (0) 1 AS locked FROM t WITH (TABLOCK, HOLDLOCK)")
    impatient = connect(timeout=0.2)
    started = time.monotonic()
    with pytest.raises(emulator.OperationalError, match=r"\(1222\)"):
        impatient.execute("INSERT INTO t VALUES (1)")
    assert time.monotonic() - started >= 0.15
    assert impatient.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0  # readers not blocked
    conn.execute("COMMIT")
    impatient.execute("INSERT INTO t VALUES (1)")


def test_second_process_writes_while_first_reads(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    orders.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (0)")
    script = textwrap.dedent(
        f"""
        import time
        from cdc_assets import emulator
        conn = emulator.connect({str(db_path)!r}, autocommit=True, timeout=30)
        for i in range(1, 41):
            conn.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, ?)", i, "p")
            if i % 10 == 0:
                emulator.scan({str(db_path)!r})
        conn.close()
        """
    )
    reader = connect()
    reader.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    reader.execute("BEGIN TRANSACTION")
    before = reader.execute("SELECT COUNT(*) FROM [dbo].[orders]").fetchone()[0]
    process = subprocess.Popen([sys.executable, "-c", script])
    seen = []
    while process.poll() is None:
        seen.append(reader.execute("SELECT COUNT(*) FROM [dbo].[orders]").fetchone()[0])
        orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()
        time.sleep(0.01)
    assert process.wait(30) == 0
    assert set(seen) <= {before}  # the snapshot never moved
    reader.execute("COMMIT")
    assert reader.execute("SELECT COUNT(*) FROM [dbo].[orders]").fetchone()[0] == 41
    emulator.scan(db_path)
    rows = change_rows(orders)
    assert sorted(r.id for r in rows) == list(range(41))
    lsns = _commit_lsns(orders)
    assert lsns == sorted(set(lsns)) and len(lsns) == 41


def test_cursor_api(conn: Connection) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, name nvarchar(10))")
    cursor = conn.cursor()
    cursor.executemany("INSERT INTO t (id, name) VALUES (?, ?)", [(i, f"n{i}") for i in range(10)])
    assert cursor.rowcount == 10
    cursor.execute("UPDATE t SET name = ? WHERE id < ?", ("x", 3))
    assert cursor.rowcount == 3
    cursor.execute("SELECT id, name FROM t ORDER BY id")
    assert cursor.description[0][:2] == ("id", int)
    first = cursor.fetchone()
    assert first.id == 0 and first.name == "x" and first == (0, "x")
    assert pickle.loads(pickle.dumps(first)) == (0, "x")
    assert len(cursor.fetchmany(4)) == 4
    assert [r.id for r in cursor] == [5, 6, 7, 8, 9]
    cursor.execute("SELECT 1 AS a; SELECT 2 AS b, N'x' AS c")
    assert cursor.fetchall() == [(1,)]
    assert cursor.nextset() is True
    assert cursor.fetchone() == (2, "x") and cursor.description[1][0] == "c"
    assert cursor.nextset() is None
    with pytest.raises(emulator.ProgrammingError, match="07002"):
        cursor.execute("SELECT ?", 1, 2)
    assert emulator.paramstyle == "qmark" and emulator.apilevel == "2.0"
    assert issubclass(emulator.NotSupportedError, emulator.DatabaseError)
    assert issubclass(emulator.DatabaseError, emulator.Error)


def test_orders_helper_ddl_roundtrip(connect: Callable[..., Connection], db_path: Path) -> None:
    conn = connect()
    conn.execute(ORDERS_DDL)
    enable_cdc(conn)
    conn.execute("DROP TABLE [dbo].[orders]")
    assert conn.execute("SELECT COUNT(*) FROM cdc.change_tables").fetchone()[0] == 0
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        conn.execute("SELECT * FROM [dbo].[orders]")
    emulator.scan(db_path)


def test_max_lsn_reaches_the_snapshot_lsn_on_an_idle_source(
    orders: Connection, connect: Callable[..., Connection], db_path: Path
) -> None:
    """As in SQL Server, the savepoint's log record and the capture job's progress rows
    (tran_id 0x00) let max LSN reach S even when no tracked table changes afterwards."""
    orders.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    emulator.scan(db_path)
    snap = connect()
    snap.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    snap.execute("BEGIN TRANSACTION")
    snap.execute("SELECT TOP (1) object_id FROM cdc.change_tables")
    snap.execute("SAVE TRANSACTION cdc_assets_snapshot")
    s = Lsn.from_numeric(snap.execute(BEGIN_LSN_SQL).fetchone()[0]).raw
    snap.execute("COMMIT TRANSACTION")
    high = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    assert high < s
    emulator.scan(db_path)
    high = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    assert high >= s
    assert (
        orders.execute(
            "SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND tran_id <> 0x00", s
        ).fetchone()[0]
        == 0
    )
    orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
    emulator.scan(db_path)
    assert _commit_lsns(orders)[-1] > s


def test_set_implicit_transactions_holds_work_until_commit(
    connect: Callable[..., Connection],
) -> None:
    """``SET IMPLICIT_TRANSACTIONS ON`` on an autocommit connection: a write opens a transaction
    that only COMMIT makes visible and ROLLBACK undoes; a SELECT of no table opens none; OFF
    leaves an open transaction open, and later writes commit at once (SQL Server's rules)."""
    conn = connect(autocommit=True)
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    conn.execute("INSERT INTO t VALUES (1, 0)")
    other = connect(autocommit=True)

    def seen() -> int:
        return other.execute("SELECT v FROM t WHERE id = 1").fetchone()[0]

    conn.execute("SET IMPLICIT_TRANSACTIONS ON")
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0  # no table: no transaction
    conn.execute("UPDATE t SET v = 1 WHERE id = 1")
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 1
    assert seen() == 0
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0
    assert seen() == 0
    conn.execute("UPDATE t SET v = 2 WHERE id = 1")
    conn.execute("COMMIT")
    assert seen() == 2
    conn.execute("UPDATE t SET v = 3 WHERE id = 1")
    conn.execute("SET IMPLICIT_TRANSACTIONS OFF")  # the open transaction stays open
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 1
    assert seen() == 2
    conn.execute("COMMIT")
    assert seen() == 3
    conn.execute("UPDATE t SET v = 4 WHERE id = 1")  # autocommit again
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0
    assert seen() == 4


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE"])
def test_repeatable_read_and_serializable_keep_what_they_read(
    connect: Callable[..., Connection], level: str
) -> None:
    """What the transaction read stays as it was, and no row appears in it, until it ends:
    another connection's write waits (here: times out) and succeeds once it has committed."""
    setup = connect(autocommit=True)
    setup.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    setup.execute("INSERT INTO t VALUES (1, 0)")
    reader = connect(autocommit=False)
    writer = connect(autocommit=True, timeout=0.5)
    reader.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
    assert reader.execute("SELECT COUNT(*), SUM(v) FROM t").fetchone()[:] == (1, 0)
    with pytest.raises(emulator.Error, match=r"1222"):
        writer.execute("INSERT INTO t VALUES (2, 5)")
    with pytest.raises(emulator.Error, match=r"1222"):
        writer.execute("UPDATE t SET v = 9 WHERE id = 1")
    assert reader.execute("SELECT COUNT(*), SUM(v) FROM t").fetchone()[:] == (1, 0)
    reader.commit()
    writer.execute("UPDATE t SET v = 9 WHERE id = 1")
    assert reader.execute("SELECT SUM(v) FROM t").fetchone()[0] == 9
    reader.commit()


def test_if_runs_one_statement_as_jdbc_commits(connect: Callable[..., Connection]) -> None:
    """``IF @@TRANCOUNT > 0 COMMIT TRAN`` (mssql-jdbc's commit with autocommit off) and
    ``IF EXISTS (...) ... ELSE ...`` with a parameter: the branch the condition picks runs."""
    conn = connect(autocommit=True)
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
    other = connect(autocommit=True)
    conn.execute("SET IMPLICIT_TRANSACTIONS ON")
    conn.execute("INSERT INTO t VALUES (1, 1)")
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 0
    conn.execute("IF @@TRANCOUNT > 0 COMMIT TRAN")
    assert conn.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1
    conn.execute("IF @@TRANCOUNT > 0 COMMIT TRAN")  # nothing open: nothing to do, no error
    conn.execute("INSERT INTO t VALUES (2, 2)")
    conn.execute("IF @@TRANCOUNT > 0 ROLLBACK TRAN")
    assert other.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 1
    ask = "IF EXISTS (SELECT 1 FROM t WHERE id = ?) SELECT N'yes' ELSE SELECT N'no'"
    assert conn.execute(ask, 1).fetchone()[0] == "yes"
    assert conn.execute(ask, 2).fetchone()[0] == "no"
    conn.execute("IF @@TRANCOUNT > 0 COMMIT TRAN")
