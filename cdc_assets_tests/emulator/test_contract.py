# ruff: noqa: E501 - the statements are copied verbatim from CONTRACT.md
"""Every statement of CONTRACT.md, verbatim, returns what pyodbc would return from SQL Server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection

MAX_LSN = "SELECT sys.fn_cdc_get_max_lsn()"
MIN_LSN = "SELECT sys.fn_cdc_get_min_lsn(?)"
INCREMENT = "SELECT sys.fn_cdc_increment_lsn(?)"
DECREMENT = "SELECT sys.fn_cdc_decrement_lsn(?)"
LSN_TO_TIME = "SELECT sys.fn_cdc_map_lsn_to_time(?)"
TIME_TO_LSN = "SELECT sys.fn_cdc_map_time_to_lsn(N'largest less than or equal', ?)"
DATABASE = (
    "SELECT name, is_cdc_enabled, snapshot_isolation_state_desc FROM sys.databases "
    "WHERE database_id = DB_ID()"
)
CAPTURE_INSTANCES = """
SELECT ct.capture_instance, s.name AS source_schema, t.name AS source_table, ct.object_id,
       ct.source_object_id, ct.start_lsn, ct.supports_net_changes, ct.create_date, ct.index_name
FROM cdc.change_tables AS ct
JOIN sys.tables AS t ON t.object_id = ct.source_object_id
JOIN sys.schemas AS s ON s.schema_id = t.schema_id
ORDER BY s.name, t.name, ct.create_date
"""
CAPTURED_COLUMNS = """
SELECT ct.capture_instance, cc.column_name, cc.column_ordinal, ty.name AS type_name,
       c.max_length, c.precision, c.scale, c.is_nullable
FROM cdc.captured_columns AS cc
JOIN cdc.change_tables AS ct ON ct.object_id = cc.object_id
JOIN sys.columns AS c ON c.object_id = ct.object_id AND c.name = cc.column_name
JOIN sys.types AS ty ON ty.user_type_id = c.user_type_id
ORDER BY ct.capture_instance, cc.column_ordinal
"""
INDEX_COLUMNS = """
SELECT ct.capture_instance, ic.column_name, ic.index_ordinal
FROM cdc.index_columns AS ic JOIN cdc.change_tables AS ct ON ct.object_id = ic.object_id
ORDER BY ct.capture_instance, ic.index_ordinal
"""
SOURCE_COLUMNS = """
SELECT c.name, c.column_id, ty.name AS type_name, c.max_length, c.precision, c.scale, c.is_nullable
FROM sys.columns AS c JOIN sys.types AS ty ON ty.user_type_id = c.user_type_id
WHERE c.object_id = OBJECT_ID(?) ORDER BY c.column_id
"""
NTH_TRANSACTION = """
SELECT start_lsn FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND start_lsn <= ?
ORDER BY start_lsn OFFSET ? ROWS FETCH NEXT 1 ROWS ONLY
"""
RANGE_STATS = """
SELECT COUNT(*) AS n, MIN(tran_end_time) AS first_commit, MAX(tran_end_time) AS last_commit
FROM cdc.lsn_time_mapping WHERE start_lsn > ? AND start_lsn <= ?
"""
CHANGE_ROWS = """
SELECT ct.[__$start_lsn], ct.[__$command_id], ct.[__$seqval], ct.[__$operation], ct.[__$update_mask],
       ct.[id], ct.[name], m.tran_end_time
FROM [cdc].[dbo_orders_CT] AS ct
LEFT JOIN cdc.lsn_time_mapping AS m ON m.start_lsn = ct.[__$start_lsn]
WHERE ct.[__$start_lsn] > ? AND ct.[__$start_lsn] <= ?
ORDER BY ct.[__$start_lsn], ct.[__$command_id], ct.[__$seqval], ct.[__$operation]
"""
ALL_CHANGES = "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all')"
ALL_CHANGES_OLD = "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all update old')"
NET_CHANGES = "SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(?, ?, N'all')"
JOBS = """
SELECT job_type, maxtrans, maxscans, continuous, pollinginterval, retention, threshold
FROM msdb.dbo.cdc_jobs WHERE database_id = DB_ID()
"""
SCAN_SESSION = """
SELECT TOP (1) session_id, start_time, end_time, tran_count, command_count, latency, last_commit_lsn,
       last_commit_time, error_count
FROM sys.dm_cdc_log_scan_sessions ORDER BY session_id DESC
"""
SNAPSHOT_LSN = """
SELECT dt.database_transaction_begin_lsn
FROM sys.dm_tran_database_transactions AS dt
JOIN sys.dm_tran_current_transaction AS cur ON cur.transaction_id = dt.transaction_id
WHERE dt.database_id = DB_ID()
"""

SETUP = [
    "CREATE TABLE [dbo].[orders] ([id] int NOT NULL, [name] nvarchar(40) NULL, [amount] decimal(12,2) NULL, CONSTRAINT [pk_orders] PRIMARY KEY ([id]))",
    "ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON",
    "EXEC sys.sp_cdc_enable_db",
    "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @supports_net_changes = 1",
    "EXEC sys.sp_cdc_change_job @job_type = N'capture', @pollinginterval = 1, @maxtrans = 500",
    "EXEC sys.sp_cdc_change_job @job_type = N'cleanup', @retention = 60",
    "EXEC sys.sp_cdc_start_job @job_type = N'capture'",
    "EXEC sys.sp_cdc_scan",
]


@pytest.fixture
def source(connect: Callable[..., Connection]) -> Connection:
    conn = connect()
    assert conn.execute(MAX_LSN).fetchone()[0] is None  # no CDC yet: NULL
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        conn.execute(CAPTURE_INSTANCES)
    for statement in SETUP:
        conn.execute(statement)
    conn.execute("BEGIN TRAN")
    conn.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, ?), (?, ?)", 1, "a", 2, "b")
    conn.execute("COMMIT")
    conn.execute("UPDATE [dbo].[orders] SET [name] = ? WHERE [id] = ?", "bb", 2)
    conn.execute("DELETE FROM [dbo].[orders] WHERE [id] = ?", 1)
    conn.execute("EXEC sys.sp_cdc_scan")
    return conn


def test_lsn_functions(source: Connection) -> None:
    high = source.execute(MAX_LSN).fetchone()[0]
    low = source.execute(MIN_LSN, "dbo_orders").fetchone()[0]
    assert isinstance(high, bytes) and len(high) == 10 and len(low) == 10 and low < high
    assert source.execute(MIN_LSN, "no_such_instance").fetchone()[0] == bytes(10)
    up = source.execute(INCREMENT, high).fetchone()[0]
    assert int.from_bytes(up, "big") == int.from_bytes(high, "big") + 1
    assert source.execute(DECREMENT, up).fetchone()[0] == high
    commit_time = source.execute(LSN_TO_TIME, high).fetchone()[0]
    assert isinstance(commit_time, dt.datetime) and commit_time.tzinfo is None
    assert source.execute(TIME_TO_LSN, commit_time).fetchone()[0] == high
    assert source.execute(TIME_TO_LSN, commit_time - dt.timedelta(days=1)).fetchone()[0] is None
    assert tuple(source.execute(DATABASE).fetchone()) == ("salesdb", True, "ON")


def test_catalog_queries(source: Connection) -> None:
    (instance,) = source.execute(CAPTURE_INSTANCES).fetchall()
    assert instance.capture_instance == "dbo_orders" and instance.source_schema == "dbo"
    assert instance.source_table == "orders" and isinstance(instance.object_id, int)
    assert isinstance(instance.start_lsn, bytes) and instance.supports_net_changes is True
    assert isinstance(instance.create_date, dt.datetime) and instance.index_name == "pk_orders"
    columns = [tuple(r) for r in source.execute(CAPTURED_COLUMNS).fetchall()]
    assert columns == [
        ("dbo_orders", "id", 1, "int", 4, 10, 0, False),
        ("dbo_orders", "name", 2, "nvarchar", 80, 0, 0, True),
        ("dbo_orders", "amount", 3, "decimal", 9, 12, 2, True),
    ]
    assert [tuple(r) for r in source.execute(INDEX_COLUMNS)] == [("dbo_orders", "id", 1)]
    assert [tuple(r) for r in source.execute(SOURCE_COLUMNS, "[dbo].[orders]")] == [
        ("id", 1, "int", 4, 10, 0, False),
        ("name", 2, "nvarchar", 80, 0, 0, True),
        ("amount", 3, "decimal", 9, 12, 2, True),
    ]
    assert source.execute(SOURCE_COLUMNS, "dbo.nothing").fetchall() == []


def test_range_queries(source: Connection) -> None:
    high = source.execute(MAX_LSN).fetchone()[0]
    # the first row is the capture job's progress row (tran_id 0x00) for sp_cdc_enable_table
    low, tran_id = source.execute(
        "SELECT TOP (1) start_lsn, tran_id FROM cdc.lsn_time_mapping ORDER BY start_lsn"
    ).fetchone()
    assert tran_id == bytes(10)
    lsns = [source.execute(NTH_TRANSACTION, low, high, n).fetchone() for n in range(4)]
    assert [r is None for r in lsns] == [False, False, False, True]
    assert lsns[2][0] == high
    n, first, last = source.execute(RANGE_STATS, low, high).fetchone()
    assert n == 3 and isinstance(first, dt.datetime) and first <= last
    rows = source.execute(CHANGE_ROWS, low, high).fetchall()
    assert [(r[1], r[3], r[5], r[6]) for r in rows] == [
        (1, 2, 1, "a"),
        (1, 2, 2, "b"),
        (1, 3, 2, "b"),
        (1, 4, 2, "bb"),
        (1, 1, 1, "a"),
    ]
    assert all(isinstance(r[7], dt.datetime) for r in rows)
    assert [d[1] for d in source.execute(CHANGE_ROWS, low, high).description] == [
        bytes,
        int,
        bytes,
        int,
        bytes,
        int,
        str,
        dt.datetime,
    ]


def test_query_functions(source: Connection) -> None:
    low = source.execute(MIN_LSN, "dbo_orders").fetchone()[0]
    high = source.execute(MAX_LSN).fetchone()[0]
    all_rows = source.execute(ALL_CHANGES, low, high).fetchall()
    assert [r[2] for r in all_rows] == [2, 2, 4, 1]
    assert [r[2] for r in source.execute(ALL_CHANGES_OLD, low, high)] == [2, 2, 3, 4, 1]
    net = source.execute(NET_CHANGES, low, high).fetchall()
    assert [(r[1], r[3], r[4]) for r in net] == [(2, 2, "bb")]
    assert source.execute(ALL_CHANGES, low, high).description[0][:2] == ("__$start_lsn", bytes)
    assert all_rows[0][6] is None
    assert source.execute(ALL_CHANGES, low, high).description[6][:2] == ("amount", Decimal)


def test_health(source: Connection, db_path: Path) -> None:
    jobs = {r.job_type: tuple(r)[1:] for r in source.execute(JOBS)}
    assert jobs == {"capture": (500, 10, True, 1, 0, 0), "cleanup": (0, 0, False, 0, 60, 5000)}
    session = source.execute(SCAN_SESSION).fetchone()
    assert isinstance(session.session_id, int) and isinstance(session.start_time, dt.datetime)
    assert session.error_count == 0 and isinstance(session.latency, int)
    source.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (9)")
    emulator.scan(db_path)
    session = source.execute(SCAN_SESSION).fetchone()
    assert session.tran_count == 1 and session.command_count == 1
    assert isinstance(session.last_commit_lsn, str) and session.last_commit_lsn.count(":") == 2


def test_snapshot_statements(source: Connection, connect: Callable[..., Connection]) -> None:
    a, b = connect(), connect()
    a.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    a.execute("BEGIN TRANSACTION")
    a.execute("SELECT TOP (0) 1 AS locked FROM [dbo].[orders] WITH (TABLOCKX, HOLDLOCK)")
    b.execute("SET TRANSACTION ISOLATION LEVEL SNAPSHOT")
    b.execute("BEGIN TRANSACTION")
    b.execute("SELECT TOP (1) object_id FROM cdc.change_tables")
    b.execute("SAVE TRANSACTION cdc_assets_snapshot")
    (lsn,) = b.execute(SNAPSHOT_LSN).fetchone()
    a.execute("ROLLBACK TRANSACTION")
    rows = b.execute("SELECT [id], [name] FROM [dbo].[orders] ORDER BY [id]").fetchall()
    b.execute("COMMIT TRANSACTION")
    b.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    assert isinstance(lsn, Decimal) and lsn == lsn.to_integral_value()
    assert [tuple(r) for r in rows] == [(2, "bb")]


def test_admin_statements(source: Connection) -> None:
    source.execute("ALTER TABLE [dbo].[orders] ADD [c] int NULL")
    source.execute(
        "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', "
        "@role_name = NULL, @capture_instance = N'dbo_orders_v2', @supports_net_changes = 1, "
        "@captured_column_list = N'id, name, c'"
    )
    source.execute("ALTER TABLE [dbo].[orders] DROP COLUMN [c]")
    source.execute(
        "EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = N'orders', "
        "@capture_instance = N'dbo_orders'"
    )
    source.execute("EXEC sys.sp_cdc_stop_job @job_type = N'capture'")
    help_rows = source.execute("EXEC sys.sp_cdc_help_change_data_capture").fetchall()
    assert [r.capture_instance for r in help_rows] == ["dbo_orders_v2"]
    assert help_rows[0].captured_column_list == "[id], [name], [c]"
    source.execute("DROP TABLE [dbo].[orders]")
    assert source.execute("EXEC sys.sp_cdc_help_change_data_capture").fetchall() == []
