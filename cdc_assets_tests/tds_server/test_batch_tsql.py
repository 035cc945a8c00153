"""The batch-level T-SQL clients send, through each real client over TDS (ODBC Driver 18,
FreeTDS, python-tds): variables, table variables with INSERT ... EXEC, BEGIN ... END blocks,
statements without ';', USE, and the result columns of the ODBC catalog procedures (read by
position by drivers, so names and order are SQL Server's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cdc_assets.emulator.procedures.catalog_procedures import (
    DATATYPE_INFO_COLUMNS,
    SP_COLUMNS_100_COLUMNS,
    SP_COLUMNS_COLUMNS,
)
from cdc_assets.workload import DEMO_TABLES, table_by_name
from cdc_assets_tests.support.tds import plain


@pytest.fixture
def db(connect: Callable[..., Any]) -> Any:
    conn = connect()
    for table in DEMO_TABLES:
        conn.execute(table.create_sql())
    conn.execute(
        "INSERT INTO dbo.orders (order_id, customer_id, status, ordered_at, total) "
        "VALUES (1, 10, 'new', '2024-01-01', 5), (2, 11, 'paid', '2024-01-02', 7.5)"
    )
    return conn


def results(conn: Any, sql: str, *params: Any) -> list[list[tuple[Any, ...]]]:
    """Every result set of a batch."""
    cursor = conn.cursor()
    cursor.execute(sql, *params)
    found = []
    while True:
        if cursor.description is not None:
            found.append(plain(cursor.fetchall()))
        if not cursor.nextset():
            return found


def names(conn: Any, sql: str) -> list[str]:
    cursor = conn.cursor()
    cursor.execute(sql)
    while cursor.description is None and cursor.nextset():
        pass
    return [d[0] for d in cursor.description]


def test_scalar_variables(db: Any) -> None:
    batch = (
        "DECLARE @n int = ?, @s nvarchar(5), @total decimal(19,4)\n"
        "SET @s = N'abcdefgh'\n"  # truncated to the declared length, as SQL Server does
        "SET @n += 1\n"
        "SELECT @total = total FROM dbo.orders WHERE order_id = @n - 1\n"
        "SELECT @n AS n, @s AS s, @total AS total"
    )
    assert results(db, batch, 2) == [[(3, "abcde", 7.5)]]


def test_select_assignment_keeps_the_value_when_no_row_matches(db: Any) -> None:
    batch = (
        "DECLARE @status char(10) = 'none'; "
        "SELECT @status = status FROM dbo.orders WHERE order_id = 99; SELECT RTRIM(@status)"
    )
    assert results(db, batch) == [[("none",)]]


def test_undeclared_variable_is_error_137(db: Any) -> None:
    with pytest.raises(Exception, match=r'Must declare the scalar variable "@nope"'):
        db.execute("SELECT @nope")


def test_table_variable_filled_by_exec_and_by_values(db: Any) -> None:
    batch = (
        "DECLARE @keys TABLE (TABLE_QUALIFIER sysname, TABLE_OWNER sysname, TABLE_NAME sysname, "
        "COLUMN_NAME sysname, KEY_SEQ smallint, PK_NAME sysname);"
        "INSERT INTO @keys EXEC sp_pkeys ?, ?;"
        "INSERT INTO @keys (TABLE_NAME, COLUMN_NAME, KEY_SEQ) VALUES (N'x', N'y', 9);"
        "SELECT TABLE_NAME, COLUMN_NAME, KEY_SEQ FROM @keys ORDER BY KEY_SEQ"
    )
    assert results(db, batch, "order lines", "dbo") == [
        [("order lines", "order_id", 1), ("order lines", "line no", 2), ("x", "y", 9)]
    ]


def test_begin_end_blocks_and_statements_without_semicolons(db: Any) -> None:
    batch = (
        "IF EXISTS (SELECT 1 FROM dbo.orders WHERE order_id = 1)\n"
        "BEGIN\n"
        "  UPDATE dbo.orders SET status = 'shipped' WHERE order_id = 1\n"
        "  SELECT status FROM dbo.orders WHERE order_id = 1\n"
        "END\n"
        "ELSE SELECT 'missing'\n"
        "SELECT COUNT(*) FROM dbo.orders"
    )
    assert results(db, batch) == [[("shipped   ",)], [(2,)]]


def test_use_of_the_served_database_and_of_another(db: Any) -> None:
    assert results(db, "USE [salesdb]; SELECT DB_NAME()") == [[("salesdb",)]]
    db.execute("USE master")  # a system database: the context of principal statements
    db.execute("USE salesdb")
    with pytest.raises(Exception, match=r"Database 'otherdb' does not exist.*911"):
        db.execute("USE otherdb")


def test_unknown_procedure_is_error_2812(db: Any) -> None:
    with pytest.raises(Exception, match=r"Could not find stored procedure 'sp_columns_170'"):
        db.execute("EXEC sp_columns_170 N'orders'")


def test_sp_tables(db: Any) -> None:
    cursor = db.cursor()
    cursor.execute("EXEC sp_tables @table_owner = 'dbo', @table_type = \"'TABLE'\"")
    assert [d[0] for d in cursor.description] == [
        "TABLE_QUALIFIER", "TABLE_OWNER", "TABLE_NAME", "TABLE_TYPE", "REMARKS",
    ]  # fmt: skip
    assert plain(cursor.fetchall()) == sorted(
        ("salesdb", "dbo", t.name, "TABLE", None) for t in DEMO_TABLES
    )


@pytest.mark.parametrize(
    ("procedure", "columns"),
    [("sp_columns", SP_COLUMNS_COLUMNS), ("sp_columns_100", SP_COLUMNS_100_COLUMNS)],
)
def test_sp_columns(db: Any, procedure: str, columns: list[tuple[str, Any]]) -> None:
    cursor = db.cursor()
    cursor.execute(f"EXEC {procedure} @table_name = N'order lines', @ODBCVer = 3")
    assert [d[0] for d in cursor.description] == [name for name, _ in columns]
    found = plain(cursor.fetchall())
    table = table_by_name(DEMO_TABLES, "dbo.order lines")
    assert [r[3] for r in found] == list(table.column_names)
    unit_price = found[4]  # decimal(12,2) NOT NULL
    assert unit_price[4:11] == (3, "decimal", 12, 14, 2, 10, 0)
    assert unit_price[16:18] == (5, "NO")
    packed_at = found[7]  # datetime2(3): SQL_TYPE_TIMESTAMP, SQL_DATETIME / SQL_CODE_TIMESTAMP
    assert packed_at[4:9] == (93, "datetime2", 23, 16, 3)
    assert packed_at[13:15] == (9, 3)


def test_sp_columns_gives_each_default_as_sys_default_constraints_has_it(db: Any) -> None:
    db.execute(
        "CREATE TABLE settings (id int PRIMARY KEY, n int NOT NULL DEFAULT 0, "
        "label nvarchar(20) DEFAULT N'new', note nvarchar(20))"
    )
    found = plain(db.execute("EXEC sp_columns_100 @table_name = N'settings'").fetchall())
    defaults = dict(plain(db.execute(
        "SELECT c.name, d.definition FROM sys.default_constraints AS d JOIN sys.columns AS c "
        "ON c.object_id = d.parent_object_id AND c.column_id = d.parent_column_id "
        "WHERE d.parent_object_id = OBJECT_ID(N'settings')"
    ).fetchall()))  # fmt: skip
    assert defaults == {"n": "((0))", "label": "(N'new')"}
    assert {r[3]: r[12] for r in found} == {"id": None, "note": None, **defaults}


def test_sp_pkeys_fkeys_and_statistics(db: Any) -> None:
    assert names(db, "EXEC sp_pkeys N'orders'") == [
        "TABLE_QUALIFIER", "TABLE_OWNER", "TABLE_NAME", "COLUMN_NAME", "KEY_SEQ", "PK_NAME",
    ]  # fmt: skip
    assert results(db, "EXEC sp_pkeys N'orders'") == [
        [("salesdb", "dbo", "orders", "order_id", 1, "pk_orders")]
    ]
    assert names(db, "EXEC sp_fkeys @fktable_name = N'order lines'") == [
        "PKTABLE_QUALIFIER", "PKTABLE_OWNER", "PKTABLE_NAME", "PKCOLUMN_NAME",
        "FKTABLE_QUALIFIER", "FKTABLE_OWNER", "FKTABLE_NAME", "FKCOLUMN_NAME", "KEY_SEQ",
        "UPDATE_RULE", "DELETE_RULE", "FK_NAME", "PK_NAME", "DEFERRABILITY",
    ]  # fmt: skip
    assert results(db, "EXEC sp_fkeys @fktable_name = N'order lines'") == [[]]
    statistics = [
        "TABLE_QUALIFIER", "TABLE_OWNER", "TABLE_NAME", "NON_UNIQUE", "INDEX_QUALIFIER",
        "INDEX_NAME", "TYPE", "SEQ_IN_INDEX", "COLUMN_NAME", "COLLATION", "CARDINALITY",
        "PAGES", "FILTER_CONDITION",
    ]  # fmt: skip
    for procedure in ("sp_statistics", "sp_statistics_100"):
        assert names(db, f"EXEC {procedure} N'orders'") == statistics
        found = results(db, f"EXEC {procedure} N'orders'")[0]
        assert [r[3:9] for r in found] == [
            (None, None, None, 0, None, None),  # the table's statistics: 2 rows
            (0, "orders", "pk_orders", 1, 1, "order_id"),
        ]
        assert found[0][10] == 2


def test_sp_datatype_info(db: Any) -> None:
    assert names(db, "EXEC sp_datatype_info_100 @data_type = 4") == [
        name for name, _ in DATATYPE_INFO_COLUMNS
    ]
    assert [r[:3] for r in results(db, "EXEC sp_datatype_info 4")[0]] == [("int", 4, 10)]
