# ruff: noqa: E501 - the setup statements are copied verbatim from CONTRACT.md
"""Every statement of CONTRACT.md, as the SQL Server layer sends it, returns what pyodbc would
return from SQL Server."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets.sqlserver import catalog, changes, discover, health, lsn_queries, ranges, snapshot
from cdc_assets.sqlserver.quoting import query_function, quote_table

# The statements the SQL Server layer sends, imported so this test checks what the product sends.
MAX_LSN = lsn_queries.MAX_LSN_QUERY
MIN_LSN = lsn_queries.MIN_LSN_QUERY
INCREMENT = lsn_queries.INCREMENT_LSN_QUERY
DECREMENT = lsn_queries.DECREMENT_LSN_QUERY
LSN_TO_TIME = lsn_queries.LSN_TO_TIME_QUERY
TIME_TO_LSN = lsn_queries.TIME_TO_LSN_QUERY
DATABASE = catalog.DATABASE_QUERY
CAPTURE_INSTANCES = catalog.CAPTURE_INSTANCES_QUERY
CAPTURED_COLUMNS = catalog.CAPTURED_COLUMNS_QUERY
INDEX_COLUMNS = catalog.KEY_COLUMNS_QUERY
SOURCE_COLUMNS = catalog.SOURCE_COLUMNS_QUERY
NTH_TRANSACTION = ranges.NTH_TRANSACTION_QUERY
RANGE_STATS = ranges.RANGE_STATS_QUERY
LAST_TRANSACTION = ranges.LAST_TRANSACTION_QUERY
ALL_CHANGES = changes.ALL_CHANGES_QUERY.format(
    function=query_function("all", "dbo_orders"), row_filter="all"
)
ALL_CHANGES_OLD = changes.ALL_CHANGES_QUERY.format(
    function=query_function("all", "dbo_orders"), row_filter="all update old"
)
NET_CHANGES = changes.ALL_CHANGES_QUERY.format(
    function=query_function("net", "dbo_orders"), row_filter="all"
)
JOBS = health.JOBS_QUERY
SCAN_SESSION = health.LAST_SCAN_QUERY
JOB_ACTIVITY = health.JOB_ACTIVITY_QUERY
SNAPSHOT_LSN = snapshot.SNAPSHOT_LSN_QUERY

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
    assert source.execute(LAST_TRANSACTION).fetchone()[0] == high
    change_rows = changes.change_rows_query(discover(source)[("dbo", "orders")].instances[0])
    rows = source.execute(change_rows, low, high).fetchall()
    assert [(r[1], r[3], r[5], r[6]) for r in rows] == [
        (1, 2, 1, "a"),
        (1, 2, 2, "b"),
        (1, 3, 2, "b"),
        (1, 4, 2, "bb"),
        (1, 1, 1, "a"),
    ]
    assert all(isinstance(r[8], dt.datetime) for r in rows)
    assert [d[1] for d in source.execute(change_rows, low, high).description] == [
        bytes,
        int,
        bytes,
        int,
        bytes,
        int,
        str,
        Decimal,
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
    assert source.execute(JOB_ACTIVITY, "capture").fetchone()[1] is None  # started
    source.execute("EXEC sys.sp_cdc_stop_job @job_type = N'capture'")
    assert isinstance(source.execute(JOB_ACTIVITY, "capture").fetchone()[1], dt.datetime)


def test_snapshot_statements(source: Connection, connect: Callable[..., Connection]) -> None:
    a, b = connect(), connect()
    a.execute(snapshot.READ_COMMITTED_STATEMENT)
    a.execute(snapshot.BEGIN_STATEMENT)
    a.execute(snapshot.LOCK_TABLE_QUERY.format(table=quote_table("dbo", "orders")))
    b.execute(snapshot.SNAPSHOT_ISOLATION_STATEMENT)
    b.execute(snapshot.BEGIN_STATEMENT)
    b.execute(snapshot.FIX_VERSION_QUERY)
    b.execute(snapshot.SAVEPOINT_STATEMENT)
    (lsn,) = b.execute(SNAPSHOT_LSN).fetchone()
    a.execute(snapshot.ROLLBACK_STATEMENT)
    rows = b.execute("SELECT [id], [name] FROM [dbo].[orders] ORDER BY [id]").fetchall()
    b.execute(snapshot.COMMIT_STATEMENT)
    b.execute(snapshot.READ_COMMITTED_STATEMENT)
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
