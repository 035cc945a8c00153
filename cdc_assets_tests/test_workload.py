"""The workload generator: the source equals its model, it is deterministic, rollbacks vanish,
and the change tables replayed from empty give the same tables (CDC is on before the first row)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdc_assets import emulator
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.lsn_queries import find_max_lsn
from cdc_assets.workload import DEMO_TABLES, TableDef, Workload, create_demo_database, read_rows
from cdc_assets_tests.support.replay import replay_keyed, replay_multiset

ALL_TYPES = {
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "bit",
    "decimal",
    "numeric",
    "money",
    "smallmoney",
    "float",
    "real",
    "char",
    "varchar",
    "nchar",
    "nvarchar",
    "text",
    "ntext",
    "binary",
    "varbinary",
    "date",
    "time",
    "datetime",
    "datetime2",
    "smalldatetime",
    "datetimeoffset",
    "uniqueidentifier",
    "xml",
}


def _scan_all(conn: emulator.Connection) -> None:
    """Capture everything committed so far (``sp_cdc_scan`` takes at most maxtrans per scan)."""
    for _ in range(100):
        before = find_max_lsn(conn)
        cdc_admin.scan(conn)
        after = find_max_lsn(conn)
        if after == before:
            return
    raise AssertionError("capture did not catch up")


def _change_rows(conn: emulator.Connection, table: TableDef) -> list[dict[str, Any]]:
    cursor = conn.execute(f"SELECT * FROM [cdc].[{table.capture_instance}_CT]")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _counts(conn: emulator.Connection) -> dict[str, int]:
    counts = {
        t.capture_instance: conn.execute(
            f"SELECT COUNT(*) FROM [cdc].[{t.capture_instance}_CT]"
        ).fetchone()[0]
        for t in DEMO_TABLES
    }
    counts["lsn_time_mapping"] = conn.execute(
        "SELECT COUNT(*) FROM cdc.lsn_time_mapping"
    ).fetchone()[0]
    return counts


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[emulator.Connection]:
    connection = emulator.connect(tmp_path / "source.db", autocommit=True, timeout=10)
    yield connection
    connection.close()


def test_demo_tables_cover_every_type_and_key_shape() -> None:
    used = {c.base_type for t in DEMO_TABLES for c in t.columns}
    assert used >= ALL_TYPES, ALL_TYPES - used
    assert len(DEMO_TABLES) >= 5
    assert any(len(t.primary_key) > 1 for t in DEMO_TABLES)
    assert any(not t.has_key for t in DEMO_TABLES)
    assert any(" " in t.name for t in DEMO_TABLES)
    assert any(" " in c.name for t in DEMO_TABLES for c in t.columns)
    assert {c.type_args for t in DEMO_TABLES for c in t.columns if c.base_type == "nvarchar"} >= {
        ("max",)
    }
    keyless = next(t for t in DEMO_TABLES if not t.has_key)
    assert "@supports_net_changes = 0" in keyless.enable_cdc_sql()


def test_source_and_change_tables_equal_the_model(conn: emulator.Connection) -> None:
    workload = create_demo_database(conn, seed=11, rows_per_table=25)
    workload.burst_rows = 60
    kinds = Counter(workload.step().kind for _ in range(120))
    for kind in ("key_update", "delete_reinsert", "churn", "rollback", "burst"):
        if not kinds[kind]:
            workload.run_transaction(kind)
    _scan_all(conn)
    assert workload.verify() == {}
    for table in DEMO_TABLES:
        changes = _change_rows(conn, table)
        columns = list(table.column_names)
        expected = workload.expected_rows(table)
        if table.has_key:
            replayed = replay_keyed([], changes, columns, list(table.primary_key))
            assert Counter(replayed.values()) == Counter(expected), table.full_name
        else:
            assert replay_multiset([], changes, columns) == Counter(expected), table.full_name
    # a fresh workload loads the same model from the database
    again = Workload(conn, seed=0)
    for table in DEMO_TABLES:
        assert Counter(again.expected_rows(table)) == Counter(workload.expected_rows(table))


def test_values_come_back_as_pyodbc_types(conn: emulator.Connection) -> None:
    workload = create_demo_database(conn, seed=5, rows_per_table=40)
    for table in DEMO_TABLES:
        rows = read_rows(conn, table)
        assert len(rows) == workload.row_count(table)
        for i, column in enumerate(table.columns):
            values = [row[i] for row in rows if row[i] is not None]
            if not column.nullable:
                assert len(values) == len(rows), column.name
            for value in values:
                base = column.base_type
                if base in ("decimal", "numeric", "money", "smallmoney"):
                    assert isinstance(value, Decimal)
                    assert value.as_tuple().exponent == -column.scale, (column.name, value)
                elif base == "datetimeoffset":
                    assert isinstance(value, dt.datetime) and value.tzinfo is not None
                elif base == "uniqueidentifier":
                    assert isinstance(value, str) and value == value.upper()
                elif base in ("char", "nchar", "binary"):
                    assert len(value) == column.length, column.name
    non_ascii = [
        v
        for row in workload.expected_rows("dbo.customers")
        for v in row
        if isinstance(v, str) and not v.isascii()
    ]
    assert non_ascii


def test_same_seed_same_statements(tmp_path: Path) -> None:
    def statements(name: str, seed: int) -> list[tuple[str, tuple[Any, ...]]]:
        with emulator.connect(tmp_path / name, autocommit=True) as connection:
            workload = create_demo_database(connection, seed=3, rows_per_table=10, record=True)
            workload.seed = seed
            workload.rng.seed(seed)
            workload.run(transactions=40)
            assert workload.statements is not None
            return workload.statements

    first = statements("a.db", 7)
    assert first == statements("b.db", 7)
    assert first != statements("c.db", 8)
    shapes = {sql.split(" ")[0] for sql, _ in first}
    assert {"INSERT", "UPDATE", "DELETE", "BEGIN", "COMMIT"} <= shapes


def test_rolled_back_transaction_leaves_no_trace(conn: emulator.Connection) -> None:
    workload = create_demo_database(conn, seed=2, rows_per_table=15)
    workload.run(transactions=10)
    _scan_all(conn)
    before_rows = {t.full_name: Counter(read_rows(conn, t)) for t in DEMO_TABLES}
    before_counts = _counts(conn)
    before_lsn = find_max_lsn(conn)
    stats_before = workload.stats.transactions
    result = workload.run_transaction("rollback")
    assert not result.committed and result.statements > 2
    _scan_all(conn)
    assert workload.verify() == {}
    assert {t.full_name: Counter(read_rows(conn, t)) for t in DEMO_TABLES} == before_rows
    assert _counts(conn) == before_counts
    assert find_max_lsn(conn) == before_lsn
    assert workload.stats.transactions == stats_before
    assert workload.stats.rolled_back >= 1


def test_failed_statement_rolls_back_the_model(conn: emulator.Connection) -> None:
    workload = create_demo_database(conn, seed=4, rows_per_table=5)
    before = {t.full_name: Counter(workload.expected_rows(t)) for t in DEMO_TABLES}

    def boom() -> None:
        workload._op_insert()
        conn.execute("SELECT * FROM [dbo].[no_such_table]")

    workload._op_mixed = boom  # type: ignore[method-assign]
    with pytest.raises(emulator.Error):
        workload.run_transaction("mixed")
    assert {t.full_name: Counter(workload.expected_rows(t)) for t in DEMO_TABLES} == before
    assert workload.verify() == {}


def test_max_rows_keeps_the_tables_bounded(conn: emulator.Connection) -> None:
    """A workload left running (the demo's) trims an over-full table with deletes: every table
    stays near max_rows, and the source still equals the model."""
    workload = create_demo_database(conn, seed=5, rows_per_table=40)
    workload.burst_rows = 60
    workload.max_rows = 60
    kinds = Counter(workload.step().kind for _ in range(400))
    assert kinds["trim"] > 0, kinds
    _scan_all(conn)
    assert workload.verify() == {}
    for table in DEMO_TABLES:
        count = conn.execute(f"SELECT COUNT(*) FROM {table.quoted}").fetchone()[0]
        # at most one transaction's worth (a burst, an order with lines) above the limit
        assert count <= 60 + 60, (table.full_name, count)
