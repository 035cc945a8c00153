"""mssql-jdbc 13.6 (what DBeaver, DataGrip, Spark's JDBC source and JVM CDC tools use) against the
TDS server: DatabaseMetaData lists every demo table, its columns and keys as SQL Server's catalog
procedures describe them, and a transaction with autocommit off rolls back and commits.

The Java program is cdc_assets_tests/support/jdbc/JdbcProbe.java, compiled once per session; the
jar comes from scripts/install_jars.sh (never downloaded here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cdc_assets import emulator
from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import DEMO_TABLES, ColumnDef, TableDef
from cdc_assets_tests.support.jdbc_probe import compile_probe, jar_path, run_probe, url

MAX = 2147483647
# java.sql.Types as mssql-jdbc reports each SQL Server type (its DataTypeFilter over sp_columns)
JDBC_TYPES = {
    "bit": -7, "tinyint": -6, "smallint": 5, "int": 4, "bigint": -5, "decimal": 3, "numeric": 2,
    "money": 3, "smallmoney": 3, "float": 8, "real": 7, "char": 1, "varchar": 12, "nchar": -15,
    "nvarchar": -9, "text": -1, "ntext": -16, "xml": -16, "binary": -2, "varbinary": -3,
    "date": 91, "time": 92, "datetime": 93, "datetime2": 93, "smalldatetime": 93,
    "datetimeoffset": -155, "uniqueidentifier": 1,
}  # fmt: skip
FIXED_SIZES = {
    "bit": (1, None), "tinyint": (3, 0), "smallint": (5, 0), "int": (10, 0), "bigint": (19, 0),
    "money": (19, 4), "smallmoney": (10, 4), "float": (15, None), "real": (7, None),
    "date": (10, 0), "datetime": (23, 3), "smalldatetime": (16, 0), "uniqueidentifier": (36, None),
    "text": (MAX, None), "ntext": (1073741823, None), "xml": (MAX, None),
}  # fmt: skip


# the statements JdbcProbe's transaction modes run: set and read customer 7's name
CUSTOMER_7_NAME = (
    "UPDATE dbo.customers SET name = ? WHERE customer_id = ?",
    "SELECT name FROM dbo.customers WHERE customer_id = ?",
    "7",
)


def expected_size(column: ColumnDef) -> tuple[int, int | None]:
    """COLUMN_SIZE and DECIMAL_DIGITS of a demo column as SQL Server reports them."""
    base = column.base_type
    if base in FIXED_SIZES:
        return FIXED_SIZES[base]
    if base in ("decimal", "numeric"):
        return column.precision, column.scale
    if base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        return (column.length if column.length is not None else MAX), None
    scale = column.scale
    first = {"time": 8, "datetime2": 19, "datetimeoffset": 26}[base]
    return (first if scale == 0 else first + 1 + scale), scale


@pytest.fixture(scope="session")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not jar_path().is_file():
        pytest.fail(f"{jar_path()} is missing: run bash scripts/install_jars.sh (or make setup)")
    return compile_probe(tmp_path_factory.mktemp("jdbc_probe"))


@pytest.fixture
def demo(tds: TdsServer, db_path: Path) -> TdsServer:
    """The served database with the demo tables and one customer."""
    conn = emulator.connect(db_path, autocommit=True)
    try:
        for table in DEMO_TABLES:
            conn.execute(table.create_sql())
        conn.execute("CREATE UNIQUE INDEX ix_customers_email ON dbo.customers (email)")
        conn.execute(
            "INSERT INTO dbo.customers (customer_id, name, country, is_active, created_at, "
            "external_id) VALUES (7, N'Ann', 'FR', 1, '2024-01-01', NEWID())"
        )
    finally:
        conn.close()
    return tds


@pytest.fixture
def metadata(demo: TdsServer, probe: Path) -> dict[str, Any]:
    names = [t.full_name for t in DEMO_TABLES]
    return run_probe(probe, "meta", url(demo.port), "salesdb", *names)


def rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    assert "error" not in result, result
    return [dict(zip(result["columns"], r, strict=True)) for r in result["rows"]]


def test_get_tables_lists_every_demo_table(metadata: dict[str, Any]) -> None:
    assert metadata["product"][:2] == ["Microsoft SQL Server", "16.00.1053"]
    assert metadata["catalog"] == metadata["catalog_after"] == "salesdb"
    listed = {(r["TABLE_SCHEM"], r["TABLE_NAME"]): r for r in rows(metadata["tables"])}
    for table in DEMO_TABLES:
        row = listed[(table.schema, table.name)]
        assert (row["TABLE_CAT"], row["TABLE_TYPE"], row["REMARKS"]) == ("salesdb", "TABLE", None)
    assert listed[("sys", "tables")]["TABLE_TYPE"] == "VIEW"
    user = [
        (r["TABLE_SCHEM"], r["TABLE_NAME"], r["TABLE_TYPE"]) for r in rows(metadata["user_tables"])
    ]
    assert user == sorted((t.schema, t.name, "TABLE") for t in DEMO_TABLES)


@pytest.mark.parametrize("table", DEMO_TABLES, ids=lambda t: t.full_name)
def test_get_columns_describes_each_column(metadata: dict[str, Any], table: TableDef) -> None:
    listed = rows(metadata["by_table"][table.full_name]["columns"])
    assert [r["COLUMN_NAME"] for r in listed] == list(table.column_names)
    for position, (row, column) in enumerate(zip(listed, table.columns, strict=True), start=1):
        size, digits = expected_size(column)
        assert (row["TABLE_CAT"], row["TABLE_SCHEM"], row["TABLE_NAME"]) == (
            "salesdb", table.schema, table.name,
        )  # fmt: skip
        assert row["TYPE_NAME"] == column.base_type, column
        assert row["DATA_TYPE"] == JDBC_TYPES[column.base_type], column
        assert (row["COLUMN_SIZE"], row["DECIMAL_DIGITS"]) == (size, digits), column
        assert row["NULLABLE"] == int(column.nullable), column
        assert row["IS_NULLABLE"] == ("YES" if column.nullable else "NO")
        assert row["ORDINAL_POSITION"] == position
        assert row["IS_AUTOINCREMENT"] == "NO"


@pytest.mark.parametrize("table", DEMO_TABLES, ids=lambda t: t.full_name)
def test_get_primary_keys_and_index_info(metadata: dict[str, Any], table: TableDef) -> None:
    found = metadata["by_table"][table.full_name]
    keys = [(r["COLUMN_NAME"], r["KEY_SEQ"], r["PK_NAME"]) for r in rows(found["primary_keys"])]
    pk_name = "pk_" + table.name.replace(" ", "_")
    assert keys == [(name, i, pk_name) for i, name in enumerate(table.primary_key, start=1)]
    indexes = [
        (r["INDEX_NAME"], r["NON_UNIQUE"], r["TYPE"], r["ORDINAL_POSITION"], r["COLUMN_NAME"])
        for r in rows(found["index_info"])
        if r["TYPE"] != 0  # the table statistic row
    ]
    expected = [(pk_name, False, 1, i, k) for i, k in enumerate(table.primary_key, start=1)]
    if table.name == "customers":
        expected.append(("ix_customers_email", False, 3, 1, "email"))
    assert indexes == expected


def test_get_imported_keys_is_empty(metadata: dict[str, Any]) -> None:
    """The emulator has no foreign keys. mssql-jdbc joins sp_fkeys' result with
    sys.foreign_keys (empty)."""
    result = metadata["by_table"]["dbo.order lines"]["imported_keys"]
    assert "error" not in result, result
    assert rows(result) == []


def test_get_type_info_lists_the_demo_types(metadata: dict[str, Any]) -> None:
    names = {r["TYPE_NAME"]: r for r in rows(metadata["type_info"])}
    for base in ("int", "bigint", "nvarchar", "decimal", "datetime2", "datetimeoffset", "bit"):
        assert base in names
    assert names["decimal"]["PRECISION"] == 38
    assert names["nvarchar"]["LITERAL_PREFIX"] == "N'"


def test_transaction_with_autocommit_off(demo: TdsServer, probe: Path) -> None:
    """setAutoCommit(false) sends SET IMPLICIT_TRANSACTIONS ON; rollback() and commit() send
    IF @@TRANCOUNT > 0 ROLLBACK/COMMIT TRAN: the rollback undoes the update, the commit keeps
    it for every connection."""
    found = run_probe(
        probe,
        "tx",
        url(demo.port),
        *CUSTOMER_7_NAME,
        "Bob",
        "Carl",
    )
    assert found == {
        "before": "Ann",
        "updated": 1,
        "inside": "Bob",
        "trancount_inside": "1",
        "after_rollback": "Ann",
        "updated_again": 1,
        "after_commit": "Carl",
        "trancount_after": "0",
        "other_connection": "Carl",
    }


def test_savepoints_keep_the_transaction_open(demo: TdsServer, db_path: Path, probe: Path) -> None:
    """setSavepoint sends ``IF @@TRANCOUNT = 0 BEGIN BEGIN TRAN IF @@TRANCOUNT = 2 COMMIT TRAN END
    SAVE TRAN [name]`` (Debezium's schema snapshot does the same); rollback(savepoint) undoes
    what came after it and leaves the transaction open (@@TRANCOUNT unchanged); the commit
    keeps the rest, and the capture job sees only the update that committed."""
    conn = emulator.connect(db_path, autocommit=True)
    conn.execute("EXEC sys.sp_cdc_enable_db")
    conn.execute(
        "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'customers', "
        "@role_name = NULL"
    )
    found = run_probe(
        probe,
        "savepoint",
        url(demo.port),
        *CUSTOMER_7_NAME,
        "Bob",
        "Carl",
        "Dan",
    )
    assert found == {
        "updated": 1,
        "trancount_at_savepoint": "1",
        "updated_again": 1,
        "inside": "Carl",
        "after_rollback_to_savepoint": "Bob",
        "trancount_after_rollback_to_savepoint": "1",
        "updated_third": 1,
        "after_unnamed_rollback": "Bob",
        "trancount_after_commit": "0",
        "other_connection": "Bob",
    }
    emulator.scan(db_path)
    rows = conn.execute(
        "SELECT [__$operation], name FROM cdc.dbo_customers_CT "
        "ORDER BY [__$start_lsn], [__$seqval], [__$operation]"
    ).fetchall()
    conn.close()
    assert [tuple(r) for r in rows] == [(3, "Ann"), (4, "Bob")]


def test_a_wrong_database_fails_the_login(demo: TdsServer, probe: Path) -> None:
    found = run_probe(probe, "meta", url(demo.port, database="nosuchdb"), "nosuchdb")
    assert found["code"] == 4060, found
