"""Against a real SQL Server (2017+, CDC enabled, SQL Server Agent running): discovery, exact
snapshot, change reads, and the whole sync through the project's Dagster definitions. Set
``CDC_TEST_SQLSERVER_DSN`` to an ODBC connection string of a database where the login may create
tables, enable CDC and set snapshot isolation (db_owner), e.g.
``DRIVER={ODBC Driver 18 for SQL Server};SERVER=localhost,1433;DATABASE=cdc_test;UID=sa;
PWD=...;TrustServerCertificate=yes``.

The tests create ``dbo.cdc_assets_live_<random>`` and drop it at the end.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from dagster import instance_for_test
from pydantic import SecretStr
from pyspark.sql import SparkSession

from cdc_assets.config import parse_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.lsn import LsnRange
from cdc_assets.spark.commit_metadata import NotPublished
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.catalog import CaptureInstance, database_info, discover
from cdc_assets.sqlserver.changes import read_changes
from cdc_assets.sqlserver.chunks import estimate_rows
from cdc_assets.sqlserver.connection import DsnSettings, RawOdbcConnectionFactory
from cdc_assets.sqlserver.errors import CaptureNotReady
from cdc_assets.sqlserver.health import capture_health
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn, wait_for_max_lsn
from cdc_assets.sqlserver.ranges import plan_next_range
from cdc_assets.sqlserver.snapshot import snapshot_table
from cdc_assets.sqlserver.watermarks import log_position
from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness

DSN_VARIABLE = "CDC_TEST_SQLSERVER_DSN"

pytestmark = [
    pytest.mark.sqlserver,
    pytest.mark.skipif(
        not os.environ.get(DSN_VARIABLE),
        reason="set CDC_TEST_SQLSERVER_DSN to run against a real SQL Server",
    ),
]


@pytest.fixture(scope="module")
def factory() -> RawOdbcConnectionFactory:
    return RawOdbcConnectionFactory(
        DsnSettings(connection_string=SecretStr(os.environ[DSN_VARIABLE]))
    )


@pytest.fixture(scope="module")
def live_table(factory: RawOdbcConnectionFactory) -> Iterator[tuple[Any, str]]:
    conn = factory.connect()
    table = f"cdc_assets_live_{uuid.uuid4().hex[:8]}"
    cursor = conn.cursor()
    if not database_info(conn).cdc_enabled:
        cdc_admin.enable_database(conn)
    cursor.execute(
        f"CREATE TABLE [dbo].[{table}] ([id] int NOT NULL, [name] nvarchar(40) NULL, "
        "[amount] decimal(12,2) NULL, [at] datetimeoffset(7) NULL, "
        f"CONSTRAINT [pk_{table}] PRIMARY KEY ([id]))"
    )
    cdc_admin.enable_table(conn, "dbo", table, supports_net_changes=True)
    try:
        yield conn, table
    finally:
        cdc_admin.disable_table(conn, "dbo", table, "all")
        cursor.execute(f"DROP TABLE [dbo].[{table}]")
        conn.close()


def wait_for_instance(conn: Any, table: str, timeout_s: float = 60) -> CaptureInstance:
    deadline = time.monotonic() + timeout_s
    while True:
        instance = discover(conn)[("dbo", table)].current_instance
        if instance is not None:
            return instance
        if time.monotonic() > deadline:
            raise CaptureNotReady("the capture job did not establish the capture instance")
        time.sleep(1)


def test_watermarks_and_row_estimate(
    factory: RawOdbcConnectionFactory, live_table: tuple[Any, str]
) -> None:
    """A lock-free chunk's watermarks on a real server: a savepoint's LSN in read committed,
    above the commit before it and below the one after it, no transaction left open; and the
    table's row count estimate from sys.partitions."""
    conn, table = live_table
    cursor = conn.cursor()
    instance = wait_for_instance(conn, table)
    cursor.execute(f"INSERT INTO [dbo].[{table}] ([id], [name]) VALUES (100, N'w')")
    reader = factory.connect(autocommit=True)
    try:
        mark = log_position(reader)
        assert reader.execute("SELECT @@TRANCOUNT").fetchone()[0] == 0
    finally:
        reader.close()
    cursor.execute(f"DELETE FROM [dbo].[{table}] WHERE [id] = 100")
    target = wait_for_max_lsn(conn, mark, timeout_s=120)
    assert target is not None
    every = LsnRange(get_min_lsn(conn, instance.name).decrement(), target)
    lsns = [
        row["__$start_lsn"]
        for batch in read_changes(conn, instance, every)
        for row in batch.to_pylist()
        if row["id"] == 100
    ]
    insert, delete = sorted(lsns)
    assert insert < mark.raw < delete
    count = cursor.execute(f"SELECT COUNT_BIG(*) FROM [dbo].[{table}]").fetchone()[0]
    assert estimate_rows(conn, "dbo", table) == count


def test_discover_snapshot_and_changes(
    factory: RawOdbcConnectionFactory, live_table: tuple[Any, str]
) -> None:
    conn, table = live_table
    cursor = conn.cursor()
    cursor.execute(
        f"INSERT INTO [dbo].[{table}] ([id], [name], [amount], [at]) VALUES "
        "(1, N'a', 1.50, SYSDATETIMEOFFSET()), (2, N'b', NULL, NULL)"
    )
    instance = wait_for_instance(conn, table)
    assert instance.key_columns == ("id",)
    assert [c.type_name for c in instance.columns] == [
        "int",
        "nvarchar",
        "decimal",
        "datetimeoffset",
    ]

    mode = "exact" if database_info(conn).snapshot_isolation else "fuzzy"
    with snapshot_table(factory, instance, mode=mode) as snap:
        rows = pa.Table.from_batches(list(snap)).to_pylist()
    assert [r["id"] for r in rows] == [1, 2]
    assert rows[0]["at"] is not None and rows[0]["at"].tzinfo is not None
    result = snap.result

    cursor.execute(f"UPDATE [dbo].[{table}] SET [name] = N'bb' WHERE [id] = 2")
    cursor.execute(f"DELETE FROM [dbo].[{table}] WHERE [id] = 1")
    time.sleep(1)
    target = wait_for_max_lsn(conn, result.lsn, timeout_s=120)
    deadline = time.monotonic() + 120
    ops: list[int] = []
    after = result.replay_from
    while time.monotonic() < deadline and ops[-3:] != [3, 4, 1]:
        next_range = plan_next_range(conn, after, 1000)
        if next_range is None:
            time.sleep(1)
            continue
        for batch in read_changes(conn, instance, next_range):
            ops += batch.column("__$operation").to_pylist()
        after = next_range.hi
    assert ops[-3:] == [3, 4, 1]
    assert target <= get_max_lsn(conn)
    assert isinstance(LsnRange(result.replay_from, after), LsnRange)

    health = capture_health(conn)
    assert health.job_configured and health.max_lsn is not None
    assert instance.name in health.min_lsn_per_instance


def _eventually_equal(harness: SyncHarness, timeout_s: float = 180) -> None:
    """Sync until every mirror equals its table (capture on a real server is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        harness.sync()
        try:
            harness.assert_mirrors_equal_source()
            return
        except (AssertionError, NotPublished):
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def test_sync_through_the_project_definitions(
    live_table: tuple[Any, str], spark: SparkSession, tmp_path: Path
) -> None:
    """The real sensor, runs, change logs and mirrors on a real server: snapshot, then inserts,
    updates and deletes, each time until every mirror equals the table."""
    conn, table = live_table
    cursor = conn.cursor()
    cursor.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")  # exact snapshots
    wait_for_instance(conn, table)
    config = parse_config(
        {
            "sources": [
                {
                    "name": SOURCE,
                    "connection": {"dsn": {"connection_string_env": DSN_VARIABLE}},
                    "tables": {"include": [f"dbo.{table}"]},
                    "sync": {"max_transactions_per_range": 3},
                }
            ],
            "storage": {"base_path": str(tmp_path / "storage")},
            "spark": {"master": "local[2]"},
        },
        base_dir=tmp_path,
        origin="live test config",
    )
    source = load_source(config.sources[0], config.storage.base_path)
    assert [t.name for t in source.tables] == [table]
    defs = build_definitions(config, [source])
    with instance_for_test() as instance:
        harness = SyncHarness(tmp_path / "no-emulator", source, defs, instance, None, spark)  # type: ignore[arg-type]
        for n in range(10, 20):
            cursor.execute(
                f"INSERT INTO [dbo].[{table}] ([id], [name], [amount], [at]) "
                "VALUES (?, ?, ?, SYSDATETIMEOFFSET())",
                n,
                f"n{n}",
                n * 1.25,
            )
        _eventually_equal(harness)
        cursor.execute(f"UPDATE [dbo].[{table}] SET [amount] = [amount] + 1 WHERE [id] % 2 = 0")
        cursor.execute(f"DELETE FROM [dbo].[{table}] WHERE [id] IN (11, 13)")
        cursor.execute(f"INSERT INTO [dbo].[{table}] ([id], [name]) VALUES (99, N'late')")
        _eventually_equal(harness)
