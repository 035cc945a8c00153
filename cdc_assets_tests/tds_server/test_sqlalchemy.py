"""SQLAlchemy 2 (``mssql+pyodbc``) reflecting the demo database served over TDS.

Through ODBC Driver 18 and FreeTDS, as a user would point SQLAlchemy at ``cdc-assets emulator
serve``: the inspector lists schemas and tables, reads every demo table's columns (names, types
as SQLAlchemy's mssql dialect maps them, nullability, defaults), primary keys, indexes and
(absent) foreign keys from the ``sys.*`` views; ``Table(..., autoload_with=engine)`` reflects
every demo table; ``pandas.read_sql_table`` reads one as a plain SELECT does.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mssql

from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import DEMO_TABLES, ColumnDef
from cdc_assets_tests.support.tds import PASSWORD, odbc_settings, wire_connect

DRIVERS = ("odbc18", "freetds")
EXTRA_DDL = (
    "CREATE INDEX ix_orders_customer ON dbo.orders (customer_id, ordered_at DESC)",
    "CREATE UNIQUE INDEX ux_products_sku ON dbo.products (sku)",
    "CREATE TABLE dbo.settings (id int IDENTITY(1,1) PRIMARY KEY, "
    "name nvarchar(40) NOT NULL CONSTRAINT df_settings_name DEFAULT N'unnamed', "
    "retries int NOT NULL DEFAULT 3, ratio decimal(5,2) DEFAULT 0.5, "
    "changed datetime2 DEFAULT GETDATE(), note varchar(20) NULL)",
)

# the SQLAlchemy type each SQL Server type reflects as (mssql dialect's ischema_names)
TYPES: dict[str, type[Any]] = {
    "tinyint": mssql.TINYINT,
    "smallint": mssql.SMALLINT,
    "int": mssql.INTEGER,
    "bigint": mssql.BIGINT,
    "bit": mssql.BIT,
    "decimal": mssql.DECIMAL,
    "numeric": mssql.NUMERIC,
    "money": mssql.MONEY,
    "smallmoney": mssql.SMALLMONEY,
    "float": mssql.FLOAT,
    "real": mssql.REAL,
    "char": mssql.CHAR,
    "varchar": mssql.VARCHAR,
    "nchar": mssql.NCHAR,
    "nvarchar": mssql.NVARCHAR,
    "text": mssql.TEXT,
    "ntext": mssql.NTEXT,
    "binary": mssql.BINARY,
    "varbinary": mssql.VARBINARY,
    "date": mssql.DATE,
    "time": mssql.TIME,
    "datetime": mssql.DATETIME,
    "datetime2": mssql.DATETIME2,
    "smalldatetime": mssql.SMALLDATETIME,
    "datetimeoffset": mssql.DATETIMEOFFSET,
    "uniqueidentifier": mssql.UNIQUEIDENTIFIER,
    "xml": mssql.XML,
}


@pytest.fixture(params=DRIVERS)
def engine(request: pytest.FixtureRequest, tds: TdsServer) -> Iterator[sa.Engine]:
    """The demo schema (and an index or two, a table with defaults) in the served database, and
    a SQLAlchemy engine on it through ``request.param``'s ODBC driver."""
    client = str(request.param)
    conn = wire_connect(client, tds.port)
    for table in DEMO_TABLES:
        conn.execute(table.create_sql())
    for ddl in EXTRA_DDL:
        conn.execute(ddl)
    conn.close()
    settings = odbc_settings(client, tds.port, password=PASSWORD, password_env=None)
    odbc = urllib.parse.quote_plus(settings.connection_string(redact=False))
    engine = sa.create_engine(f"mssql+pyodbc:///?odbc_connect={odbc}")
    yield engine
    engine.dispose()


def _expected_type(column: ColumnDef) -> tuple[type[Any], dict[str, Any]]:
    base = column.base_type
    attributes: dict[str, Any] = {}
    if base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        attributes["length"] = column.length
    elif base in ("decimal", "numeric"):
        attributes["precision"] = column.precision
        attributes["scale"] = column.scale
    return TYPES[base], attributes


def test_schemas_and_every_demo_table(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    assert {"dbo", "INFORMATION_SCHEMA", "sys"} <= set(inspector.get_schema_names())
    tables = inspector.get_table_names()
    assert sorted(tables) == sorted([t.name for t in DEMO_TABLES] + ["settings"])
    assert "order lines" in tables
    assert inspector.has_table("order lines") and not inspector.has_table("no such table")


def test_columns_with_their_types_nullability_and_defaults(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    for table in DEMO_TABLES:
        columns = inspector.get_columns(table.name, schema=table.schema)
        assert [c["name"] for c in columns] == list(table.column_names), table.name
        for reflected, column in zip(columns, table.columns, strict=True):
            kind, attributes = _expected_type(column)
            where = f"{table.name}.{column.name}"
            assert type(reflected["type"]) is kind, (where, reflected["type"])
            for name, value in attributes.items():
                assert getattr(reflected["type"], name) == value, (where, name)
            assert reflected["nullable"] is column.nullable, where
            assert reflected["default"] is None, where
    settings = {c["name"]: c for c in inspector.get_columns("settings")}
    assert {name: c["default"] for name, c in settings.items()} == {
        "id": None,
        "name": "(N'unnamed')",
        "retries": "((3))",
        "ratio": "((0.5))",
        "changed": "(getdate())",
        "note": None,
    }
    assert settings["id"]["autoincrement"] is True
    assert settings["id"]["identity"] == {"start": 1, "increment": 1}
    assert settings["name"]["autoincrement"] is False


def test_primary_keys_indexes_and_no_foreign_keys(engine: sa.Engine) -> None:
    inspector = sa.inspect(engine)
    for table in DEMO_TABLES:
        key = inspector.get_pk_constraint(table.name, schema=table.schema)
        assert key["constrained_columns"] == list(table.primary_key), table.name
        if table.primary_key:
            assert key["name"] == "pk_" + table.name.replace(" ", "_")
            assert key["dialect_options"] == {"mssql_clustered": True}
        else:
            assert key["name"] is None
        assert inspector.get_foreign_keys(table.name, schema=table.schema) == []
    assert inspector.get_indexes("orders") == [
        {
            "name": "ix_orders_customer",
            "unique": False,
            "column_names": ["customer_id", "ordered_at"],
            "dialect_options": {"mssql_include": [], "mssql_clustered": False},
        }
    ]
    assert [
        (i["name"], i["unique"], i["column_names"]) for i in inspector.get_indexes("products")
    ] == [("ux_products_sku", True, ["sku"])]
    assert inspector.get_indexes("order lines") == []


def test_every_demo_table_reflects(engine: sa.Engine) -> None:
    metadata = sa.MetaData()
    for table in DEMO_TABLES:
        reflected = sa.Table(table.name, metadata, schema=table.schema, autoload_with=engine)
        assert [c.name for c in reflected.columns] == list(table.column_names)
        assert [c.name for c in reflected.primary_key.columns] == list(table.primary_key)
        assert [c.nullable for c in reflected.columns] == [c.nullable for c in table.columns]
    orders = metadata.tables["dbo.orders"]
    assert [i.name for i in orders.indexes] == ["ix_orders_customer"]


def test_read_sql_table_reads_what_a_select_returns(engine: sa.Engine) -> None:
    lines = [
        (
            1,
            1,
            10,
            2,
            Decimal("9.99"),
            Decimal("0.1250000000"),
            "gift",
            dt.datetime(2024, 5, 1, 12, 30, 0, 125000),
            b"\x00\x01\x02\x03",
        ),
        (1, 2, 11, 1, Decimal("100.00"), None, None, None, None),
        (
            2,
            1,
            12,
            5,
            Decimal("0.50"),
            Decimal("-3.5"),
            "ünïcode",
            dt.datetime(2024, 5, 2, 8, 0),
            b"\xff\xff\x00\x00",
        ),
    ]
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO [dbo].[order lines] ([order_id], [line no], [product_id], [quantity], "
            "[unit price], [tax], [gift_message], [packed_at], [batch]) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            lines,
        )
    frame = pd.read_sql_table("order lines", engine, schema="dbo")
    with engine.connect() as connection:
        selected = connection.exec_driver_sql(
            "SELECT * FROM [dbo].[order lines] ORDER BY [order_id], [line no]"
        ).fetchall()
    assert list(frame.columns) == [c.name for c in DEMO_TABLES[3].columns]
    rows = [
        tuple(None if pd.isna(v) else v for v in row)
        for row in frame.sort_values(["order_id", "line no"]).itertuples(index=False)
    ]
    # pandas holds SQL decimals as float64 (it maps sqlalchemy.Numeric to float)
    assert rows == [tuple(float(v) if isinstance(v, Decimal) else v for v in r) for r in selected]
    assert [tuple(r) for r in selected] == lines
    assert frame["unit price"].dtype == "float64" and frame["packed_at"].dtype.kind == "M"


def test_the_isolation_level_is_read_from_the_session(engine: sa.Engine) -> None:
    """get_isolation_level() finds dm_exec_sessions in sys.system_views and reads its own
    session's level there; each level set is the one read back (READ UNCOMMITTED runs, and so
    reads, as READ COMMITTED)."""
    with engine.connect() as connection:
        assert connection.get_isolation_level() == "READ COMMITTED"
    for level, shown in (
        ("SERIALIZABLE", "SERIALIZABLE"),
        ("REPEATABLE READ", "REPEATABLE READ"),
        ("READ UNCOMMITTED", "READ COMMITTED"),
    ):
        with engine.connect().execution_options(isolation_level=level) as connection:
            assert connection.get_isolation_level() == shown, level
            spid, count = connection.exec_driver_sql(
                "SELECT session_id, open_transaction_count FROM sys.dm_exec_sessions"
            ).one()
            assert spid == connection.exec_driver_sql("SELECT @@SPID").scalar()
            # SQLAlchemy runs with autocommit off: its reads opened a transaction
            assert count == 1 == connection.exec_driver_sql("SELECT @@TRANCOUNT").scalar()
