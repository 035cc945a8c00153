"""Catalog discovery against the emulator: instances, columns, keys, the current instance."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets import emulator
from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver.catalog import database_info, discover, get_source_columns
from cdc_assets.sqlserver.errors import CdcNotEnabled

from .conftest import ORDERS_DDL, CdcDatabase

ENTRIES_DDL = (
    "CREATE TABLE [sales].[entries] ([account] int NOT NULL, [seq] bigint NOT NULL, "
    "[note] varchar(20) NULL, [at] datetime2(7) NULL, [price] money NULL, "
    "CONSTRAINT [pk_entries] PRIMARY KEY ([account], [seq]))"
)
EVENTS_DDL = "CREATE TABLE [dbo].[events] ([kind] varchar(10) NOT NULL, [amount] int NULL)"


class CountingConnection:
    """Wraps a DB-API connection and records every statement sent through its cursors."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.statements: list[str] = []
        self.autocommit = conn.autocommit

    def cursor(self) -> Any:
        cursor = self.conn.cursor()
        outer = self

        class Cursor:
            def __getattr__(self, name: str) -> Any:
                return getattr(cursor, name)

            def execute(self, sql: str, *params: Any) -> Any:
                outer.statements.append(sql)
                return cursor.execute(sql, *params)

        return Cursor()

    def commit(self) -> None:
        self.conn.commit()

    def rollback(self) -> None:
        self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


def test_discover_three_tables_in_three_queries(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db()
    db.execute("CREATE SCHEMA [sales]")
    for ddl in (ORDERS_DDL, ENTRIES_DDL, EVENTS_DDL):
        db.execute(ddl)
    db.enable_table("orders")
    db.enable_table("entries", schema="sales")
    db.enable_table("events", net_changes=False)
    db.scan()
    counting = CountingConnection(db.conn)
    tables = discover(counting)
    assert len(counting.statements) == 3
    assert list(tables) == [("dbo", "events"), ("dbo", "orders"), ("sales", "entries")]

    orders = tables[("dbo", "orders")]
    (instance,) = orders.instances
    assert orders.current_instance == instance and orders.qualified_name == "[dbo].[orders]"
    assert instance.name == "dbo_orders" and instance.change_table == "[cdc].[dbo_orders_CT]"
    assert instance.column_names == ("id", "name", "amount")
    assert instance.key_columns == ("id",) and instance.index_name == "pk_orders"
    assert instance.supports_net_changes and isinstance(instance.start_lsn, Lsn)
    amount = instance.columns[2]
    assert (amount.type_name, amount.precision, amount.scale, amount.nullable) == (
        "decimal",
        12,
        2,
        True,
    )

    entries = tables[("sales", "entries")].current_instance
    assert entries is not None and entries.name == "sales_entries"
    assert entries.key_columns == ("account", "seq")
    assert [c.type_name for c in entries.columns] == [
        "int",
        "bigint",
        "varchar",
        "datetime2",
        "money",
    ]

    events = tables[("dbo", "events")].current_instance
    assert events is not None and events.key_columns == () and not events.supports_net_changes


def test_second_capture_instance_after_alter_table(orders_db: CdcDatabase) -> None:
    db = orders_db
    db.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, N'a')")
    db.scan()
    db.execute("ALTER TABLE [dbo].[orders] ADD [region] nvarchar(10) NULL")
    drift = get_source_columns(db.conn, "dbo", "orders")
    assert [c.name for c in drift] == ["id", "name", "amount", "region"]
    (v1,) = discover(db.conn)[("dbo", "orders")].instances
    assert "region" not in v1.column_names  # added columns are not captured by the old instance

    db.enable_table("orders", capture_instance="dbo_orders_v2")
    table = discover(db.conn)[("dbo", "orders")]
    assert [i.name for i in table.instances] == ["dbo_orders", "dbo_orders_v2"]
    v2 = table.instance("dbo_orders_v2")
    assert v2 is not None and v2.column_names == ("id", "name", "amount", "region")
    assert v2.start_lsn is None  # not established before the capture job sees it
    assert table.current_instance is not None and table.current_instance.name == "dbo_orders"
    db.execute("INSERT INTO [dbo].[orders] ([id], [name], [region]) VALUES (2, N'b', N'eu')")
    db.scan()
    table = discover(db.conn)[("dbo", "orders")]
    current = table.current_instance
    assert current is not None and current.name == "dbo_orders_v2"
    v1, v2 = table.instances
    assert v1.start_lsn is not None and v2.start_lsn is not None and v1.start_lsn < v2.start_lsn
    # a range starting before v2 existed must still be read from v1
    older = table.instance_covering(v1.start_lsn)
    assert older is not None and older.name == "dbo_orders"
    newer = table.instance_covering(v2.start_lsn)
    assert newer is not None and newer.name == "dbo_orders_v2"
    assert table.instance_covering(Lsn.ZERO) is None


def test_keys_from_unique_index(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(
        "CREATE TABLE [dbo].[t] ([a] int NOT NULL, [b] int NOT NULL, "
        "CONSTRAINT [pk_t] PRIMARY KEY ([b], [a]))"
    )
    instance = discover(db.conn)[("dbo", "t")].current_instance
    assert instance is not None and instance.key_columns == ("b", "a")


def test_database_info(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, snapshot_isolation=False, name="shop")
    info = database_info(db.conn)
    assert info.cdc_enabled and not info.snapshot_isolation and info.name.startswith("shop")


def test_cdc_not_enabled_names_the_database(tmp_path: Any) -> None:
    conn = emulator.connect(str(tmp_path / "plain.db"), autocommit=True)
    try:
        conn.execute(ORDERS_DDL)
        with pytest.raises(CdcNotEnabled) as info:
            discover(conn)
        assert info.value.database == "plain"
        assert "sp_cdc_enable_db" in str(info.value)
    finally:
        conn.close()


def test_missing_source_table_has_no_columns(orders_db: CdcDatabase) -> None:
    assert get_source_columns(orders_db.conn, "dbo", "nothing") == ()
