"""Each real client (pyodbc + ODBC Driver 18, pyodbc + FreeTDS, python-tds) gets from the TDS
server what the in-process DB-API returns: the SQL Server layer's catalog, LSN, range and change
queries give equal values of the same Python types, every column type of the demo tables
round-trips, errors carry SQL Server's numbers, and results stream (several result sets,
cancellation, large results)."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_assets import emulator
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import (
    LsnNotAvailable,
    count_changes,
    database_info,
    discover,
    get_max_lsn,
    get_min_lsn,
    range_stats,
    read_changes,
    read_function_changes,
    translate_dbapi_error,
)
from cdc_assets.sqlserver.quoting import quote_table
from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import Workload
from cdc_assets_tests.support.tds import PASSWORD, USER, wire_connect


def _typed(rows: list[Any]) -> list[tuple[tuple[type, Any], ...]]:
    return [tuple((type(v), v) for v in r) for r in rows]


def test_sqlserver_layer_reads_the_same_through_every_client(
    shop: tuple[Any, TdsServer, Workload], client: str
) -> None:
    local, server, _ = shop
    wire = wire_connect(client, server.port)
    try:
        assert database_info(wire) == database_info(local)
        tables = discover(wire)
        assert tables == discover(local) and len(tables) >= 5
        high = get_max_lsn(wire)
        assert high == get_max_lsn(local)
        for table in tables.values():
            instance = table.current_instance
            assert instance is not None
            low = get_min_lsn(wire, instance.name)
            assert low == get_min_lsn(local, instance.name)
            lsn_range = LsnRange(low, high)  # (low, high]: everything after the first change
            assert range_stats(wire, lsn_range) == range_stats(local, lsn_range)
            assert count_changes(wire, instance, lsn_range) == count_changes(
                local, instance, lsn_range
            )
            got = pa.Table.from_batches(list(read_changes(wire, instance, lsn_range)))
            want = pa.Table.from_batches(list(read_changes(local, instance, lsn_range)))
            assert got.schema == want.schema
            assert got.to_pylist() == want.to_pylist(), instance.name
            if client != "pytds":  # whole rows of the change function: values and types
                sql = f"SELECT * FROM cdc.fn_cdc_get_all_changes_{instance.name}(?, ?, N'all')"
                lo = low.raw
                assert _typed(wire.execute(sql, lo, high.raw).fetchall()) == _typed(
                    local.execute(sql, lo, high.raw).fetchall()
                )
            functions = list(read_function_changes(wire, instance, lsn_range, row_filter="all"))
            assert functions == list(
                read_function_changes(local, instance, lsn_range, row_filter="all")
            )
    finally:
        wire.close()


def test_every_column_type_round_trips(shop: tuple[Any, TdsServer, Workload], client: str) -> None:
    """Every table of the demo (all the types the project maps) reads back equal, with pyodbc's
    Python types: also through parameters (the row's own values bound back in a WHERE)."""
    local, server, _ = shop
    wire = wire_connect(client, server.port)
    try:
        for (schema, name), table in sorted(discover(local).items()):
            sql = f"SELECT * FROM {quote_table(schema, name)} ORDER BY 1, 2"
            want = local.execute(sql).fetchall()
            got = wire.execute(sql).fetchall()
            assert _typed(got) == _typed(want), name
            columns = table.current_instance.column_names  # type: ignore[union-attr]
            key = columns[0]
            for row in want[:3]:
                value = row[0]
                if value is None:
                    continue
                match = f"SELECT COUNT(*) FROM {quote_table(schema, name)} WHERE [{key}] = ?"
                assert wire.execute(match, value).fetchone()[0] >= 1, (name, key, value)
    finally:
        wire.close()


def test_errors_carry_sql_server_numbers(
    shop: tuple[Any, TdsServer, Workload], client: str
) -> None:
    local, server, _ = shop
    wire = wire_connect(client, server.port)
    try:
        instance = next(iter(discover(local).values())).current_instance
        assert instance is not None
        low = get_min_lsn(local, instance.name)
        sql = f"SELECT * FROM cdc.fn_cdc_get_all_changes_{instance.name}(?, ?, N'all')"
        below = bytes(10)
        with pytest.raises(Exception, match=r"insufficient number of arguments") as info:
            wire.execute(sql, below, low.raw).fetchall()
        if client == "pytds":
            assert "(313)" in str(info.value)
        else:  # the project's translation of the driver's error
            with pytest.raises(LsnNotAvailable):
                list(read_changes(wire, instance, LsnRange(type(low)(below), low)))
            assert "(313)" in str(translate_dbapi_error(info.value).message) or (
                translate_dbapi_error(info.value).native_error == 313
            )
        with pytest.raises(Exception, match=r"(?i)primary key.*\(2627\)"):
            first = local.execute("SELECT TOP (1) * FROM dbo.orders ORDER BY 1").fetchone()
            columns = ", ".join(["?"] * len(first))
            wire.execute(f"INSERT INTO dbo.orders VALUES ({columns})", *first)
        # the connection is still usable after errors
        assert wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] >= 1
    finally:
        wire.close()


def test_several_result_sets_and_row_counts(
    shop: tuple[Any, TdsServer, Workload], client: str
) -> None:
    _, server, _ = shop
    wire = wire_connect(client, server.port)
    try:
        cursor = wire.cursor()
        cursor.execute("SELECT 1 AS a; SELECT N'x' AS b, CAST(2 AS bigint) AS c")
        assert [tuple(r) for r in cursor.fetchall()] == [(1,)]
        assert cursor.nextset()
        assert [tuple(r) for r in cursor.fetchall()] == [("x", 2)]
        assert not cursor.nextset()
        cursor.execute("UPDATE dbo.orders SET [status] = [status] WHERE 1 = 1")
        assert cursor.rowcount == wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0]
    finally:
        wire.close()


def test_cancel_a_large_result_and_go_on(
    tmp_path: Path, tls_context: ssl.SSLContext, client: str
) -> None:
    """A client that stops reading a large result (ATTENTION, or abandoning it) gets the
    connection back at once; rows are streamed, not gathered first."""
    path = tmp_path / "big.db"
    local = emulator.connect(path, autocommit=True)
    local.execute("CREATE TABLE dbo.big (id int PRIMARY KEY, pad nvarchar(100))")
    local.cursor().executemany(
        "INSERT INTO dbo.big VALUES (?, ?)", [(i, "x" * 100) for i in range(1, 5001)]
    )
    with TdsServer(path, logins={USER: PASSWORD}, tls=tls_context) as server:
        wire = wire_connect(client, server.port, database="big")
        try:
            cursor = wire.cursor()
            cursor.execute("SELECT * FROM dbo.big ORDER BY id")
            assert cursor.fetchone()[0] == 1
            if client != "pytds":
                cursor.cancel()
            cursor.close()
            again = wire.cursor()
            again.execute("SELECT COUNT(*) FROM dbo.big")
            assert again.fetchone()[0] == 5000
            again.execute("SELECT MAX(id) FROM dbo.big WHERE id < ?", 500)
            assert again.fetchone()[0] == 499
        finally:
            wire.close()
    local.close()


def test_transactions_through_the_driver(
    shop: tuple[Any, TdsServer, Workload], client: str
) -> None:
    """autocommit off (the driver's transaction requests or implicit transactions), commit and
    rollback, and snapshot isolation set through the driver."""
    local, server, _ = shop
    wire = wire_connect(client, server.port, autocommit=False)
    try:
        before = local.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0]
        wire.execute("DELETE FROM dbo.orders")
        assert local.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] == before
        wire.rollback()
        assert wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] == before
        wire.commit()
        wire.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
        wire.commit()
        seen = wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0]
        local.execute("DELETE FROM dbo.orders WHERE 1 = 1")
        assert wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] == seen
        wire.commit()
        assert wire.execute("SELECT COUNT(*) FROM dbo.orders").fetchone()[0] == 0
        wire.commit()
    finally:
        wire.close()
    assert isinstance(dt.datetime.now(), dt.datetime)
