"""pymssql 2.4.6 (FreeTDS 1.5 inside), with its defaults, against the TDS server: it connects
(its connection settings include ``SET CURSOR_CLOSE_ON_COMMIT ON``), queries, reads the CDC
functions with LSNs bound as parameters (as ``bytearray``, which pymssql inlines into the batch
as ``0x...`` literals), and its transactions (autocommit off: BEGIN TRAN after each commit)
commit and roll back as the in-process DB-API sees them."""

from __future__ import annotations

from typing import Any

import pymssql
import pytest

from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import Workload
from cdc_assets_tests.support.tds import DATABASE, PASSWORD, USER

CHANGES = (
    "SELECT [__$start_lsn], [__$seqval], [__$operation], [__$update_mask], customer_id, name, "
    "country FROM cdc.fn_cdc_get_all_changes_dbo_customers({}, {}, N'all update old') "
    "ORDER BY [__$start_lsn], [__$seqval], [__$operation]"
)


def _connect(server: TdsServer) -> Any:
    return pymssql.connect(
        server="127.0.0.1", port=server.port, user=USER, password=PASSWORD, database=DATABASE
    )


def test_pymssql_reads_cdc_functions_with_lsn_parameters(
    shop: tuple[Any, TdsServer, Workload],
) -> None:
    local, server, _ = shop
    conn = _connect(server)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT @@VERSION")
        assert " - 16.0." in cursor.fetchone()[0]  # what SQLAlchemy's pymssql dialect parses
        cursor.execute("SELECT sys.fn_cdc_get_max_lsn()")
        high = cursor.fetchone()[0]
        cursor.execute("SELECT sys.fn_cdc_get_min_lsn(%s)", ("dbo_customers",))
        low = cursor.fetchone()[0]
        assert isinstance(low, bytes) and len(low) == 10 and low < high
        assert high == local.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
        # bytearray: pymssql inlines it as 0x...; bytes it may inline as a string literal
        cursor.execute(CHANGES.format("%s", "%s"), (bytearray(low), bytearray(high)))
        got = [tuple(r) for r in cursor.fetchall()]
        want = [tuple(r) for r in local.execute(CHANGES.format("?", "?"), low, high).fetchall()]
        assert got == want and len(got) > 8
        cursor.execute("SELECT sys.fn_cdc_increment_lsn(%s)", (bytearray(high),))
        above = cursor.fetchone()[0]
        with pytest.raises(pymssql.OperationalError, match="313"):
            cursor.execute(CHANGES.format("%s", "%s"), (bytearray(above), bytearray(above)))
            cursor.fetchall()
    finally:
        conn.close()


def test_pymssql_transactions_commit_and_roll_back(shop: tuple[Any, TdsServer, Workload]) -> None:
    local, server, _ = shop
    conn = _connect(server)
    insert = (
        "INSERT INTO dbo.customers (customer_id, name, country, is_active, created_at, "
        "external_id) VALUES (%s, %s, 'FR', 1, '2024-01-01', NEWID())"
    )
    try:
        cursor = conn.cursor()
        cursor.execute(insert, (900001, "rolled back"))
        cursor.execute("SELECT @@TRANCOUNT")
        assert cursor.fetchone()[0] == 1
        conn.rollback()
        cursor.execute(insert, (900002, "committed"))
        conn.commit()
    finally:
        conn.close()
    rows = local.execute(
        "SELECT customer_id, name FROM dbo.customers WHERE customer_id > 900000"
    ).fetchall()
    assert [tuple(r) for r in rows] == [(900002, "committed")]
