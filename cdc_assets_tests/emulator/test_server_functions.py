"""What clients ask a server when they connect: its version, properties and who they are.

Version parsers (mssql-jdbc, SQLAlchemy, go-sqlcmd) read ``@@VERSION`` and
``SERVERPROPERTY('ProductVersion')``; CDC consumers check ``SERVERPROPERTY('EngineEdition')``;
tools show ``SUSER_SNAME()``. Also run through each real client over TDS
(``cdc_assets_tests/tds_server/test_emulator_semantics.py``).
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection


def test_version_and_server_properties_as_sql_server_2022_gives_them(conn: Connection) -> None:
    (version,) = conn.execute("SELECT @@VERSION").fetchone()
    assert re.match(r"Microsoft SQL Server 2022 \(RTM\) - 16\.0\.\d+\.\d+ \(X64\)", version)
    row = conn.execute(
        "SELECT SERVERPROPERTY('ProductVersion'), SERVERPROPERTY('ProductMajorVersion'), "
        "SERVERPROPERTY(N'Edition'), SERVERPROPERTY('EngineEdition'), "
        "SERVERPROPERTY('productlevel'), SERVERPROPERTY('NoSuchProperty')"
    ).fetchone()
    assert tuple(row) == (
        version.split(" - ")[1].split()[0],
        "16",
        "Developer Edition (64-bit)",
        3,
        "RTM",
        None,
    )


def test_the_login_and_the_database_user(conn: Connection, login: str) -> None:
    row = conn.execute("SELECT SUSER_SNAME(), SUSER_NAME(), CURRENT_USER, USER_NAME()").fetchone()
    user = "dbo" if login == "sa" else login
    assert tuple(row) == (login, login, login, user)


def test_date_parts_and_offsets_as_sql_server_computes_them(conn: Connection) -> None:
    """DATEPART of each unit (Sunday = 1 and weeks from Sunday: DATEFIRST 7), TZOFFSET of
    TODATETIMEOFFSET and SWITCHOFFSET, the hour the offset moves; CDC consumers ask
    ``DATEPART(TZOFFSET, SYSDATETIMEOFFSET())``."""
    stamp = "CAST('2024-03-03 10:20:30.1234567' AS datetime2)"
    units = "year quarter month dayofyear day week weekday hour minute second millisecond"
    row = conn.execute(
        "SELECT " + ", ".join(f"DATEPART({unit}, {stamp})" for unit in units.split())
    ).fetchone()
    assert tuple(row) == (2024, 1, 3, 63, 3, 10, 1, 10, 20, 30, 123)
    moved = f"SWITCHOFFSET(TODATETIMEOFFSET({stamp}, '+05:30'), '-03:00')"
    row = conn.execute(
        f"SELECT DATEPART(TZOFFSET, TODATETIMEOFFSET({stamp}, '+05:30')), "
        f"DATEPART(tz, {moved}), DATEPART(hour, {moved}), DATEPART(minute, {moved}), "
        "DATEPART(TZOFFSET, TODATETIMEOFFSET(GETDATE(), -120)), "
        "CASE WHEN DATEPART(TZOFFSET, SYSDATETIMEOFFSET()) BETWEEN -840 AND 840 THEN 1 END"
    ).fetchone()
    assert tuple(row) == (330, -180, 1, 50, -120, 1)


def test_an_offset_out_of_range_is_error_9810(conn: Connection) -> None:
    with pytest.raises(emulator.Error, match=r"9810"):
        conn.execute("SELECT TODATETIMEOFFSET(GETDATE(), '+14:01')")


def test_offset_values_keep_the_instant(conn: Connection) -> None:
    row = conn.execute(
        "SELECT TODATETIMEOFFSET(CAST('2024-03-01 10:00:00.5' AS datetime2), '+05:00'), "
        "SWITCHOFFSET(TODATETIMEOFFSET(CAST('2024-03-01 10:00:00' AS datetime2), '+05:00'), "
        "'-03:00')"
    ).fetchone()
    plus5 = dt.timezone(dt.timedelta(hours=5))
    assert row[0] == dt.datetime(2024, 3, 1, 10, 0, 0, 500000, tzinfo=plus5)
    assert row[1] == dt.datetime(2024, 3, 1, 2, 0, tzinfo=dt.timezone(dt.timedelta(hours=-3)))
    assert row[1] == dt.datetime(2024, 3, 1, 5, 0, tzinfo=dt.UTC)


def test_object_names_as_other_cdc_consumers_ask_for_them(orders: Connection) -> None:
    """``OBJECT_SCHEMA_NAME(object_id, DB_ID(?))`` and ``OBJECT_NAME(object_id, DB_ID())``, as
    CDC consumers list capture instances' source tables."""
    rows = orders.execute(
        "SELECT OBJECT_SCHEMA_NAME(source_object_id, DB_ID()), OBJECT_NAME(source_object_id, "
        "DB_ID()), OBJECT_SCHEMA_NAME(source_object_id), capture_instance FROM cdc.change_tables"
    ).fetchall()
    assert [tuple(r) for r in rows] == [("dbo", "orders", "dbo", "dbo_orders")]


def test_database_ids_and_names_as_sql_server_numbers_them(conn: Connection) -> None:
    """The served database is 5, the system databases keep their ids, anything else is NULL."""
    row = conn.execute(
        "SELECT DB_ID(), DB_ID(N'SalesDB'), DB_ID('master'), DB_ID('msdb'), DB_ID('other'), "
        "DB_NAME(), DB_NAME(5), DB_NAME(2), DB_NAME(99), DB_ID(?), DB_NAME(?)",
        "tempdb",
        4,
    ).fetchone()
    name = conn.execute("SELECT name FROM sys.databases").fetchval()
    assert tuple(row) == (5, 5, 1, 4, None, name, name, "tempdb", None, 2, "msdb")


def test_information_schema_as_clients_read_it(orders: Connection) -> None:
    """What SQLAlchemy's inspector and JDBC tools read: tables, columns with their types,
    schemas, the primary key and its columns; views, foreign keys and routines: none."""
    tables = orders.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES "
        "WHERE TABLE_SCHEMA = 'dbo'"
    ).fetchall()
    assert [tuple(r) for r in tables] == [("dbo", "orders", "BASE TABLE")]
    columns = orders.execute(
        "SELECT COLUMN_NAME, ORDINAL_POSITION, IS_NULLABLE, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, "
        "NUMERIC_PRECISION, NUMERIC_SCALE, COLLATION_NAME FROM INFORMATION_SCHEMA.COLUMNS "
        "WHERE TABLE_SCHEMA = N'dbo' AND TABLE_NAME = N'orders' ORDER BY ORDINAL_POSITION"
    ).fetchall()
    latin = "SQL_Latin1_General_CP1_CI_AS"
    assert [tuple(r) for r in columns] == [
        ("id", 1, "NO", "int", None, 10, 0, None),
        ("name", 2, "YES", "nvarchar", 50, None, None, latin),
        ("qty", 3, "YES", "int", None, 10, 0, None),
    ]
    schemas = {r[0] for r in orders.execute("SELECT SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA")}
    assert {"dbo", "cdc", "INFORMATION_SCHEMA", "sys"} <= schemas
    key = orders.execute(
        "SELECT tc.CONSTRAINT_NAME, k.COLUMN_NAME, k.ORDINAL_POSITION "
        "FROM INFORMATION_SCHEMA.TABLE_CONSTRAINTS AS tc "
        "JOIN INFORMATION_SCHEMA.KEY_COLUMN_USAGE AS k ON k.CONSTRAINT_NAME = tc.CONSTRAINT_NAME "
        "AND k.TABLE_NAME = tc.TABLE_NAME "
        "WHERE tc.TABLE_NAME = 'orders' AND tc.CONSTRAINT_TYPE = 'PRIMARY KEY'"
    ).fetchall()
    assert [tuple(r) for r in key] == [("pk_orders", "id", 1)]
    for view in ("VIEWS", "REFERENTIAL_CONSTRAINTS", "ROUTINES"):
        assert orders.execute(f"SELECT COUNT(*) FROM INFORMATION_SCHEMA.{view}").fetchone()[0] == 0


def test_collate_compares_as_the_collation_named(conn: Connection) -> None:
    """Catalog queries of mssql-jdbc and database tools write ``x COLLATE database_default``;
    the database's collation is case-insensitive, a _CS_ one is not."""
    conn.execute("CREATE TABLE names_t (id int PRIMARY KEY, s nvarchar(10))")
    conn.execute("INSERT INTO names_t VALUES (1, N'Abc')")
    count = "SELECT COUNT(*) FROM names_t WHERE s COLLATE {} = N'abc'"
    for collation, expected in (
        ("database_default", 1),
        ("SQL_Latin1_General_CP1_CI_AS", 1),
        ("Latin1_General_CS_AS", 0),
        ("Latin1_General_BIN2", 0),
    ):
        assert conn.execute(count.format(collation)).fetchval() == expected, collation
    with pytest.raises(emulator.Error, match=r"collation .Japanese_Unicode"):
        conn.execute("SELECT s COLLATE Japanese_Unicode FROM names_t")


def test_dateadd_as_sql_server_adds(conn: Connection) -> None:
    """DATEADD of date, datetime and datetime2 values keeps the type; a month added to the 31st
    is the month's last day; time units carry into the date."""
    row = conn.execute(
        "SELECT DATEADD(SECOND, 180, CAST('2024-01-31 23:58:00.1234567' AS datetime2)), "
        "DATEADD(month, 1, CAST('2024-01-31' AS date)), DATEADD(yy, -1, CAST('2024-02-29' AS "
        "date)), DATEADD(day, 1, CAST('2024-02-28 10:00' AS datetime)), "
        "DATEADD(ms, 1500, CAST('2024-01-01 00:00:00' AS datetime2(3)))"
    ).fetchone()
    assert tuple(row) == (
        dt.datetime(2024, 2, 1, 0, 1, 0, 123456),
        dt.date(2024, 2, 29),
        dt.date(2023, 2, 28),
        dt.datetime(2024, 2, 29, 10, 0),
        dt.datetime(2024, 1, 1, 0, 0, 1, 500000),
    )
