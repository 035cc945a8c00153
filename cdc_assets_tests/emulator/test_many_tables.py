"""Many tables: connections reread only what DDL changed, capture reads only written tables.

The catalog a connection holds is brought up to date from the record of catalog changes; these
tests make that record lie in the ways it can (DDL rolled back, DDL from other connections in
between, a database file made before the record existed) and check every connection still sees
exactly the committed schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets.emulator.catalog import catalog, sqlite_db
from cdc_assets.workload import Workload, create_captured_tables, small_tables

from .conftest import all_changes


def _names(conn: Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sys.tables WHERE is_ms_shipped = 0")}


def _select_works(conn: Connection, table: str) -> bool:
    try:
        conn.execute(f"SELECT COUNT(*) FROM [dbo].[{table}]").fetchone()
    except emulator.ProgrammingError:
        return False
    return True


def test_create_captured_tables_makes_captured_tables(conn: Connection, db_path: Path) -> None:
    timings: dict[str, float] = {}
    tables = create_captured_tables(conn, 12, rows_per_table=3, timings=timings)
    assert [t.name for t in tables] == [f"t{i:04d}" for i in range(12)]
    assert set(timings) == {"create", "enable", "rows"}
    assert _names(conn) == {t.name for t in tables}
    instances = conn.execute("SELECT capture_instance FROM cdc.change_tables").fetchall()
    assert sorted(r[0] for r in instances) == sorted(t.capture_instance for t in tables)
    emulator.scan(db_path)  # establishes the instances; the rows were inserted after that
    emulator.scan(db_path)
    rows = all_changes(conn, tables[5].capture_instance)
    assert [(r[2], r[4], r[6]) for r in rows] == [(2, 1, 1), (2, 2, 2), (2, 3, 3)]
    # a workload runs on them (the helper's tables are ordinary TableDefs)
    workload = Workload(conn, seed=3, tables=small_tables(12), load=True)
    workload.run(transactions=20)
    assert workload.verify() == {}
    # a second call adds tables under another prefix in the same database
    more = create_captured_tables(conn, 2, prefix="u", rows_per_table=0)
    assert {t.name for t in more} <= _names(conn)


def test_catalog_follows_ddl_of_other_connections_and_rollbacks(
    connect: Callable[..., Connection],
) -> None:
    a = connect()
    b = connect()
    a.execute("CREATE TABLE [dbo].[one] ([id] int NOT NULL PRIMARY KEY, [v] int NULL)")
    assert _select_works(b, "one")
    # DDL rolled back in a: a's catalog saw the table inside the transaction, nobody sees it after
    a.execute("BEGIN TRANSACTION")
    a.execute("CREATE TABLE [dbo].[ghost] ([id] int NOT NULL PRIMARY KEY)")
    assert _select_works(a, "ghost")
    a.execute("ROLLBACK")
    # b commits the next catalog change (it takes the rolled-back change's place in the record)
    b.execute("CREATE TABLE [dbo].[two] ([id] int NOT NULL PRIMARY KEY)")
    b.execute("ALTER TABLE [dbo].[one] ADD [w] nvarchar(10) NULL")
    for number, conn in enumerate((a, b)):
        assert not _select_works(conn, "ghost")
        assert _select_works(conn, "two")
        conn.execute("INSERT INTO [dbo].[one] ([id], [v], [w]) VALUES (?, 1, N'x')", number)
    b.execute("DROP TABLE [dbo].[two]")
    assert not _select_works(a, "two")
    assert _names(a) == _names(b) == {"one"}


def test_catalog_follows_cdc_enable_and_disable(
    connect: Callable[..., Connection], db_path: Path
) -> None:
    a = connect()
    b = connect()
    create_captured_tables(a, 3)
    assert b.execute("SELECT COUNT(*) FROM cdc.dbo_t0001_CT").fetchone()[0] == 0
    a.execute(
        "EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = N't0001', "
        "@capture_instance = N'all'"
    )
    with pytest.raises(emulator.ProgrammingError):
        b.execute("SELECT COUNT(*) FROM cdc.dbo_t0001_CT")
    assert b.execute("SELECT is_tracked_by_cdc FROM sys.tables WHERE name = 't0001'").fetchone()[
        0
    ] in (0, False)
    b.execute("UPDATE [dbo].[t0001] SET [qty] = 5")  # not tracked any more: no change log
    a.execute("EXEC sys.sp_cdc_disable_db")
    with pytest.raises(emulator.ProgrammingError):
        b.execute("SELECT COUNT(*) FROM cdc.dbo_t0002_CT")
    b.execute("UPDATE [dbo].[t0002] SET [qty] = 5")


def test_capture_reads_only_written_tables_and_old_files(conn: Connection, db_path: Path) -> None:
    tables = create_captured_tables(conn, 4, rows_per_table=1)
    emulator.scan(db_path)
    emulator.scan(db_path)
    conn.execute("UPDATE [dbo].[t0002] SET [qty] = 20 WHERE [id] = 1")
    # a database file made before the record of written tables and catalog changes: they are
    # created when it is opened, and the transactions committed before are captured in full
    raw = sqlite3.connect(db_path)
    raw.execute("DROP TABLE _emu_transaction_tables")
    raw.execute("DROP TABLE _emu_catalog_changes")
    raw.commit()
    raw.close()
    assert emulator.scan(db_path) == 1
    fresh = emulator.connect(db_path, autocommit=True)
    try:
        fresh.execute("UPDATE [dbo].[t0003] SET [qty] = 30 WHERE [id] = 1")
        fresh.execute("CREATE TABLE [dbo].[later] ([id] int NOT NULL PRIMARY KEY)")
        assert _select_works(conn, "later")
    finally:
        fresh.close()
    assert emulator.scan(db_path) == 1
    updates = {
        t.name: [r[6] for r in all_changes(conn, t.capture_instance) if r[2] == 4] for t in tables
    }
    assert updates == {"t0000": [], "t0001": [], "t0002": [20], "t0003": [30]}


def test_incremental_catalog_equals_a_full_read(connect: Callable[..., Connection]) -> None:
    """After every step of random DDL from two connections (some of it rolled back), the catalog
    each connection brings up to date equals the catalog read in full."""
    rng = Random(7)
    conns = [connect(), connect()]
    conns[0].execute("EXEC sys.sp_cdc_enable_db")
    tables: set[str] = set()
    tracked: set[str] = set()
    for step in range(60):
        conn = rng.choice(conns)
        rollback = rng.random() < 0.2
        name = rng.choice(sorted(tables)) if tables else f"r{step}"
        action = rng.choice(["create", "create", "alter", "drop", "enable", "disable"])
        if name not in tables:
            action = "create"
        elif action == "enable" and name in tracked:
            action = "disable"
        elif action == "disable" and name not in tracked:
            action = "enable"
        if action == "create":
            name = f"r{step}"
        if rollback:
            conn.execute("BEGIN TRANSACTION")
        conn.execute(
            {
                "create": f"CREATE TABLE [dbo].[{name}] ([id] int NOT NULL PRIMARY KEY, [v] int)",
                "alter": f"ALTER TABLE [dbo].[{name}] ADD [c{step}] nvarchar(5) NULL",
                "drop": f"DROP TABLE [dbo].[{name}]",
                "enable": "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', "
                f"@source_name = N'{name}', @role_name = NULL",
                "disable": "EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', "
                f"@source_name = N'{name}', @capture_instance = N'all'",
            }[action]
        )
        if rollback:
            conn.execute("ROLLBACK")
        elif action == "create":
            tables.add(name)
        elif action == "drop":
            tables.discard(name)
            tracked.discard(name)
        elif action == "enable":
            tracked.add(name)
        elif action == "disable":
            tracked.discard(name)
        for other in conns:
            session = other._session
            current = session.refresh_catalog()
            session.db.execute("BEGIN")
            try:
                full = catalog.load(session.db)
            finally:
                session.db.execute("COMMIT")
            assert current.token == full.token
            assert current.tables == full.tables, step
            assert current.instances == full.instances, step
            assert {t.name for t in current.tables_by_id.values() if t.kind == "user"} == tables
            assert {t.name for t in current.tables_by_id.values() if t.tracked} == tracked


def test_pooled_connections_stay_few_and_never_outlive_their_file(tmp_path: Path) -> None:
    """Closed sessions keep their SQLite connection for the next (a thousand-table schema is
    parsed once), but the pool over all files stays bounded (each holds file descriptors), and
    a file deleted and made anew is never written through a connection to the old one."""
    paths = [tmp_path / f"db{i}.db" for i in range(sqlite_db.POOL_SIZE + 4)]
    for path in paths:
        for _ in range(2):  # two sessions open at once: both go back to the pool
            first, second = emulator.connect(path), emulator.connect(path)
            first.close()
            second.close()
    assert len(sqlite_db._pool) <= sqlite_db.POOL_SIZE
    assert {key[0] for key, _, _ in sqlite_db._pool} <= {str(p) for p in paths[-4:]}

    path = paths[-1]
    with emulator.connect(path, autocommit=True) as conn:
        conn.execute("CREATE TABLE dbo.old_one (id int PRIMARY KEY)")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with emulator.connect(path, autocommit=True) as conn:
        assert "old_one" not in _names(conn)
        conn.execute("CREATE TABLE dbo.new_one (id int PRIMARY KEY)")
    with emulator.connect(path, autocommit=True) as conn:
        assert _names(conn) == {"new_one"}
