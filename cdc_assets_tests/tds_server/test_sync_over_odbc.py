"""The whole sync through Microsoft ODBC Driver 18: the source's connection is the ``odbc:``
config a user writes for a real SQL Server (``driver:`` the driver's absolute path, TLS with a
trusted self-signed certificate, the password in an environment variable), pointed at the
emulator served over TDS. The Dagster definitions, the sensor and Spark (whose executors open
their own driver connections) run exactly as in production; every mirror ends equal to its source.

Few and small on purpose (CPU is scarce): one random concurrent workload per snapshot mode, and
test_sync.py's cleanup-gap and schema-change scenarios run unchanged on the ``harness`` fixture
below, whose source is the same ODBC connection.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets.sqlserver import get_max_lsn
from cdc_assets.sqlserver.connection import OdbcConnectionFactory
from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import DEMO_TABLES
from cdc_assets_tests.dagster import test_sync
from cdc_assets_tests.dagster.conftest import SyncHarness, make_harness
from cdc_assets_tests.support.tds import PASSWORD, PASSWORD_ENV, USER, odbc18_driver


@pytest.fixture
def source_server(tmp_path: Path, tls_context: ssl.SSLContext) -> Iterator[TdsServer]:
    """The TDS server for the harness's source file (``source.db``, database ``source``)."""
    with TdsServer(tmp_path / "source.db", logins={USER: PASSWORD}, tls=tls_context) as server:
        yield server


def odbc_connection(server: TdsServer) -> dict[str, Any]:
    """The ``connection:`` block a user writes for a SQL Server with ODBC Driver 18."""
    return {
        "odbc": {
            "server": "127.0.0.1",
            "port": server.port,
            "database": server.database,
            "user": USER,
            "password_env": PASSWORD_ENV,
            "driver": odbc18_driver(),
            "encrypt": "yes",
            "trust_server_certificate": True,
        }
    }


@pytest.fixture
def harness(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, source_server: TdsServer
) -> SyncHarness:
    built = make_harness(tmp_path, spark, instance, connection=odbc_connection(source_server))
    assert isinstance(built.source.factory, OdbcConnectionFactory)
    return built


@pytest.mark.parametrize(("seed", "mode"), [(21, "auto"), (22, "fuzzy")])
def test_random_workload_through_odbc18_ends_with_mirrors_equal_to_the_source(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    source_server: TdsServer,
    seed: int,
    mode: str,
) -> None:
    """Multi-table transactions, key updates, deletes and re-inserts race the sync: an exact
    (snapshot isolation) or fuzzy snapshot read in key chunks by Spark executors over ODBC, then
    ranges of at most 8 transactions, until every mirror equals its source table."""
    tables = DEMO_TABLES if mode == "auto" else tuple(t for t in DEMO_TABLES if t.primary_key)
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        seed=seed,
        rows=30,
        tables=tables,
        max_transactions=8,
        snapshot_mode=mode,
        chunk_rows=12,
        connection=odbc_connection(source_server),
    )
    # each sync run races a burst of writes
    workload = harness.sync_racing_writes(rounds=2, steps=10, seed=seed + 100)
    assert workload.stats.transactions > 0
    harness.capture()
    harness.sync()
    lsn = harness.assert_mirrors_equal_source()
    source = harness.source.connect()
    try:
        assert lsn == get_max_lsn(source)
    finally:
        source.close()
    snapshot_modes = {
        harness.source.store.properties(t.change_log_key.path, "snapshot")["mode"]
        for t in harness.source.tables
    }
    assert snapshot_modes == {"exact" if mode == "auto" else "fuzzy"}
    _assert_served_over_tls(source_server)


def _assert_served_over_tls(server: TdsServer) -> None:
    """The sync's connections were the driver's: TLS logins of the configured user."""
    accepted = [a for a in server.login_attempts if a.accepted]
    assert accepted, "no login reached the TDS server"
    assert {(a.user, a.database, a.encryption) for a in accepted} == {(USER, server.database, 1)}


def test_cleanup_gap_through_odbc18(harness: SyncHarness, source_server: TdsServer) -> None:
    """Cleanup removes a range's changes before it is read: the table is re-snapshotted over
    ODBC and every mirror ends equal to its source (test_sync.py's scenario)."""
    test_sync.test_cleanup_gap_resnapshots_the_table_and_rebuilds_its_mirror(harness)
    _assert_served_over_tls(source_server)


def test_schema_change_through_odbc18(harness: SyncHarness, source_server: TdsServer) -> None:
    """A column added with a second capture instance, discovered and read over ODBC: the table
    switches to the new instance with exact values (test_sync.py's scenario)."""
    test_sync.test_schema_change_switches_to_the_new_capture_instance(harness)
    _assert_served_over_tls(source_server)
