"""The control flow of ordinary T-SQL scripts, as SQL Server runs it: WHILE with BREAK and
CONTINUE, TRY ... CATCH with the ERROR_ functions and @@ERROR, THROW, RAISERROR, PRINT as
informational messages, @@ROWCOUNT, RETURN, WAITFOR DELAY; and a loop over sys.tables that
enables CDC on each table."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets_tests.emulator.conftest import ORDERS_DDL


def _sets(conn: Connection, sql: str) -> list[tuple[list[tuple[str, str]], list[tuple]]]:
    """Each result of ``sql``: its messages and rows (none for a row count)."""
    cursor = conn.execute(sql)
    found = []
    while True:
        rows = [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        found.append((list(cursor.messages), rows))
        if not cursor.nextset():
            return found


def _texts(messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(state, text.removeprefix(emulator.errors.DRIVER)) for state, text in messages]


def test_while_with_break_and_continue(conn: Connection) -> None:
    conn.execute(ORDERS_DDL)
    found = _sets(
        conn,
        """DECLARE @i int = 0
        WHILE @i < 10
        BEGIN
            SET @i += 1
            DECLARE @seen int  -- declared once: keeps its value from round to round
            SET @seen = ISNULL(@seen, 0) + 1
            IF @i % 2 = 0 CONTINUE
            IF @i > 7 BREAK
            INSERT INTO dbo.orders (id, qty) VALUES (@i, @seen)
        END
        SELECT @i AS i, @seen AS seen""",
    )
    assert found[-1][1] == [(9, 9)]
    rows = conn.execute("SELECT id, qty FROM dbo.orders ORDER BY id").fetchall()
    assert [tuple(r) for r in rows] == [(1, 1), (3, 3), (5, 5), (7, 7)]


def test_try_catch_reads_the_error(conn: Connection) -> None:
    conn.execute(ORDERS_DDL)
    conn.execute("INSERT INTO dbo.orders (id) VALUES (1)")
    found = _sets(
        conn,
        """BEGIN TRY
            INSERT INTO dbo.orders (id) VALUES (2)
            INSERT INTO dbo.orders (id) VALUES (1)
            INSERT INTO dbo.orders (id) VALUES (3)
        END TRY
        BEGIN CATCH
            SELECT @@ERROR AS e, ERROR_NUMBER() AS n, ERROR_SEVERITY() AS s, ERROR_STATE() AS st,
                   ERROR_MESSAGE() AS m
            SELECT @@ERROR AS after_one
        END CATCH
        SELECT ERROR_NUMBER() AS outside""",
    )
    (error,) = found[1][1]
    assert error[:4] == (2627, 2627, 14, 1)
    assert error[4].startswith("Violation of PRIMARY KEY constraint") and "dbo.orders" in error[4]
    assert found[2][1] == [(0,)]  # @@ERROR: of the statement before, which succeeded
    assert found[3][1] == [(None,)]
    ids = [r[0] for r in conn.execute("SELECT id FROM dbo.orders ORDER BY id")]
    assert ids == [1, 2]  # the failed statement alone is undone; the TRY block stops there


def test_throw_and_rethrow(conn: Connection) -> None:
    found = _sets(
        conn,
        """BEGIN TRY
            BEGIN TRY
                THROW 50001, N'inner', 3;
            END TRY
            BEGIN CATCH
                PRINT N'caught ' + ERROR_MESSAGE();
                THROW;
            END CATCH
        END TRY
        BEGIN CATCH
            SELECT ERROR_NUMBER() AS n, ERROR_STATE() AS st, ERROR_SEVERITY() AS s
        END CATCH""",
    )
    assert _texts(found[0][0]) == [("[01000] (0)", "caught inner")]
    assert found[0][1] == [(50001, 3, 16)]
    with pytest.raises(emulator.ProgrammingError, match=r"outer \(50002\)"):
        conn.execute("THROW 50002, 'outer', 1")
    with pytest.raises(emulator.ProgrammingError, match=r"\(10704\)"):
        conn.execute("THROW")
    with pytest.raises(emulator.ProgrammingError, match=r"\(35100\)"):
        conn.execute("THROW 49999, 'low', 1")


def test_what_catch_does_not_catch(conn: Connection) -> None:
    """Name resolution fails when SQL Server compiles the statement: no CATCH block sees it; nor
    does one see what the emulator does not support."""
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        conn.execute("BEGIN TRY SELECT * FROM dbo.nosuch END TRY BEGIN CATCH PRINT 'no' END CATCH")
    with pytest.raises(emulator.NotSupportedError):
        conn.execute(
            "BEGIN TRY SELECT STRING_AGG(name, N',') FROM sys.tables END TRY "
            "BEGIN CATCH PRINT 'no' END CATCH"
        )


def test_raiserror_and_print(conn: Connection) -> None:
    found = _sets(
        conn,
        """PRINT 'first'
        RAISERROR ('%s has %d rows (%5.2s)', 10, 2, N'dbo.t', 42, 'abc') WITH NOWAIT
        SELECT 1 AS one
        PRINT 12.5
        RAISERROR ('not shown: the batch goes on', 0, 1)""",
    )
    assert _texts(found[0][0]) == [
        ("[01000] (0)", "first"),
        ("[01000] (50000)", "dbo.t has 42 rows (   ab)"),
    ]
    assert found[0][1] == [(1,)]
    assert _texts(found[1][0]) == [
        ("[01000] (0)", "12.5"),
        ("[01000] (50000)", "not shown: the batch goes on"),
    ]
    with pytest.raises(emulator.ProgrammingError, match=r"table dbo\.x is missing \(50000\)"):
        conn.execute("RAISERROR (N'table %s is missing', 16, 1, 'dbo.x')")
    try:
        conn.execute("RAISERROR ('severe', 18, 7)")
    except emulator.Error as exc:
        assert (exc.number, exc.severity, exc.state) == (50000, 18, 7)


def test_rowcount_return_and_waitfor(conn: Connection) -> None:
    conn.execute(ORDERS_DDL)
    conn.execute("INSERT INTO dbo.orders (id) VALUES (1), (2), (3)")
    found = _sets(
        conn,
        """UPDATE dbo.orders SET qty = 1 WHERE id >= 2
        SELECT @@ROWCOUNT AS updated
        SELECT id FROM dbo.orders
        SELECT @@ROWCOUNT AS selected
        DELETE FROM dbo.orders WHERE id = 99
        IF @@ROWCOUNT = 0 PRINT 'nothing deleted'
        DECLARE @x int
        SET @x = 5
        SELECT @@ROWCOUNT AS assigned""",
    )
    values = [rows for _, rows in found if rows]
    assert values[0] == [(2,)] and values[2] == [(3,)] and values[3] == [(1,)]
    assert ("[01000] (0)", "nothing deleted") in _texts(found[-1][0])
    assert [rows for _, rows in _sets(conn, "SELECT 1 AS a RETURN SELECT 2 AS b")] == [[(1,)]]
    started = time.monotonic()
    conn.execute("WAITFOR DELAY '00:00:00.300'")
    assert time.monotonic() - started >= 0.3


def test_a_loop_over_sys_tables_enables_cdc_on_each(conn: Connection, db_path: Path) -> None:
    for name in ("a", "b", "c_2"):
        conn.execute(f"CREATE TABLE dbo.[{name}] (id int PRIMARY KEY, v int)")
    conn.execute("EXEC sys.sp_cdc_enable_db")
    conn.execute(
        """DECLARE @schema sysname, @name sysname
        WHILE EXISTS (SELECT 1 FROM sys.tables
                      WHERE is_tracked_by_cdc = 0 AND SCHEMA_NAME(schema_id) = N'dbo')
        BEGIN
            SELECT TOP (1) @schema = SCHEMA_NAME(schema_id), @name = name FROM sys.tables
            WHERE is_tracked_by_cdc = 0 AND SCHEMA_NAME(schema_id) = N'dbo' ORDER BY name
            PRINT N'enabling ' + @name
            EXEC sys.sp_cdc_enable_table @source_schema = @schema, @source_name = @name,
                @role_name = NULL
        END"""
    )
    instances = conn.execute("SELECT capture_instance FROM cdc.change_tables ORDER BY 1")
    assert [r[0] for r in instances] == ["dbo_a", "dbo_b", "dbo_c_2"]
    conn.execute("INSERT INTO dbo.[c_2] (id, v) VALUES (1, 2)")
    emulator.scan(db_path)
    assert conn.execute("SELECT COUNT(*) FROM cdc.[dbo_c_2_CT]").fetchone()[0] == 1
