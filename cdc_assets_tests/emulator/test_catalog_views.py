"""The ``sys.*`` views of keys, indexes, defaults and services, against SQL Server's documentation.

SQLAlchemy's inspector reads ``sys.indexes``, ``sys.index_columns``, ``sys.key_constraints``,
``sys.default_constraints``, ``sys.identity_columns``, ``sys.computed_columns`` and
``sys.extended_properties``; CDC consumers read ``sys.dm_server_services`` to see whether the
agent runs. Also run through each real client over TDS
(``cdc_assets_tests/tds_server/test_catalog_views.py``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets.emulator.catalog import system_views
from cdc_assets_tests.emulator.conftest import ORDERS_DDL, enable_cdc

_OBJECT = (
    "name object_id principal_id schema_id parent_object_id type type_desc create_date "
    "modify_date is_ms_shipped is_published is_schema_published"
)
_COLUMN = (
    "object_id name column_id system_type_id user_type_id max_length precision scale "
    "collation_name is_nullable is_ansi_padded is_rowguidcol is_identity is_computed "
    "is_filestream is_replicated is_non_sql_subscribed is_merge_published is_dts_replicated "
    "is_xml_document xml_collection_id default_object_id rule_object_id is_sparse "
    "is_column_set generated_always_type generated_always_type_desc"
)
# column names in the order Microsoft Learn documents them (SQL Server 2022)
DOCUMENTED: dict[str, str] = {
    "sys.objects": _OBJECT,
    "sys.columns": _COLUMN,
    "sys.indexes": (
        "object_id name index_id type type_desc is_unique data_space_id ignore_dup_key "
        "is_primary_key is_unique_constraint fill_factor is_padded is_disabled is_hypothetical "
        "is_ignored_in_optimization allow_row_locks allow_page_locks has_filter "
        "filter_definition compression_delay suppress_dup_key_messages auto_created "
        "optimize_for_sequential_key"
    ),
    "sys.index_columns": (
        "object_id index_id index_column_id column_id key_ordinal partition_ordinal "
        "is_descending_key is_included_column column_store_order_ordinal"
    ),
    "sys.key_constraints": f"{_OBJECT} unique_index_id is_system_named is_enforced",
    "sys.default_constraints": f"{_OBJECT} parent_column_id definition is_system_named",
    "sys.foreign_keys": (
        f"{_OBJECT} referenced_object_id key_index_id is_disabled is_not_for_replication "
        "is_not_trusted delete_referential_action delete_referential_action_desc "
        "update_referential_action update_referential_action_desc is_system_named"
    ),
    "sys.foreign_key_columns": (
        "constraint_object_id constraint_column_id parent_object_id parent_column_id "
        "referenced_object_id referenced_column_id"
    ),
    "sys.identity_columns": (
        f"{_COLUMN} seed_value increment_value last_value is_not_for_replication"
    ),
    "sys.computed_columns": f"{_COLUMN} definition uses_database_collation is_persisted",
    "sys.extended_properties": "class class_desc major_id minor_id name value",
    "sys.dm_server_services": (
        "servicename startup_type startup_type_desc status status_desc process_id "
        "last_startup_time service_account filename is_clustered cluster_nodename "
        "instant_file_initialization_enabled"
    ),
}

SHOP_DDL = (
    "CREATE TABLE dbo.shop ([id] int NOT NULL, [line no] smallint NOT NULL, "
    "sku varchar(20) NOT NULL, qty int NOT NULL DEFAULT 0, label nvarchar(20) "
    "CONSTRAINT df_shop_label DEFAULT N'new', note varchar(10) DEFAULT 'x', price decimal(9,2) "
    "DEFAULT (-1.5), stamp datetime2 DEFAULT GETUTCDATE(), gone int DEFAULT NULL, "
    "CONSTRAINT pk_shop PRIMARY KEY ([id], [line no]), CONSTRAINT uq_shop_sku UNIQUE (sku))"
)


def _rows(conn: Connection, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in conn.execute(sql).fetchall()]


def _value(conn: Connection, sql: str) -> object:
    return conn.execute(sql).fetchone()[0]


@pytest.mark.parametrize("view", sorted(DOCUMENTED))
def test_views_have_sql_servers_columns_in_order(conn: Connection, view: str) -> None:
    cursor = conn.execute(f"SELECT * FROM {view} WHERE 1 = 0")
    assert [d[0] for d in cursor.description] == DOCUMENTED[view].split()
    assert cursor.fetchall() == []


def test_primary_key_heap_and_nonclustered_indexes(conn: Connection) -> None:
    """The primary key is the clustered index 1, a table without one a heap (0); UNIQUE
    constraints and CREATE INDEX are nonclustered indexes from 2, with their columns."""
    conn.execute(SHOP_DDL)
    conn.execute("CREATE TABLE dbo.log (at datetime2 NOT NULL, msg nvarchar(100))")
    conn.execute("CREATE INDEX ix_shop_qty ON dbo.shop (qty DESC, label)")
    conn.execute("CREATE UNIQUE NONCLUSTERED INDEX ix_log_at ON dbo.log (at)")
    indexes = _rows(
        conn,
        "SELECT o.name AS table_name, i.name, i.index_id, i.type, i.type_desc, i.is_unique, "
        "i.is_primary_key, i.is_unique_constraint FROM sys.indexes AS i "
        "JOIN sys.objects AS o ON o.object_id = i.object_id "
        "WHERE o.name IN ('shop', 'log') ORDER BY o.name, i.index_id",
    )
    assert indexes == [
        ("log", None, 0, 0, "HEAP", False, False, False),
        ("log", "ix_log_at", 2, 2, "NONCLUSTERED", True, False, False),
        ("shop", "pk_shop", 1, 1, "CLUSTERED", True, True, False),
        ("shop", "uq_shop_sku", 2, 2, "NONCLUSTERED", True, False, True),
        ("shop", "ix_shop_qty", 3, 2, "NONCLUSTERED", False, False, False),
    ]
    columns = _rows(
        conn,
        "SELECT i.name, ic.index_column_id, c.name AS column_name, ic.key_ordinal, "
        "ic.is_descending_key, ic.is_included_column FROM sys.index_columns AS ic "
        "JOIN sys.indexes AS i ON i.object_id = ic.object_id AND i.index_id = ic.index_id "
        "JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
        "WHERE ic.object_id = OBJECT_ID('dbo.shop') ORDER BY ic.index_id, ic.key_ordinal",
    )
    assert columns == [
        ("pk_shop", 1, "id", 1, False, False),
        ("pk_shop", 2, "line no", 2, False, False),
        ("uq_shop_sku", 1, "sku", 1, False, False),
        ("ix_shop_qty", 1, "qty", 1, True, False),
        ("ix_shop_qty", 2, "label", 2, False, False),
    ]


def test_key_constraints_are_objects_of_their_table(conn: Connection) -> None:
    conn.execute(SHOP_DDL)
    conn.execute("CREATE TABLE dbo.tags (tag nvarchar(20) PRIMARY KEY, code int UNIQUE)")
    keys = _rows(
        conn,
        "SELECT OBJECT_NAME(k.parent_object_id), k.name, k.type, k.type_desc, "
        "k.unique_index_id, k.is_system_named, k.is_enforced FROM sys.key_constraints AS k "
        "ORDER BY OBJECT_NAME(k.parent_object_id), k.unique_index_id",
    )
    assert keys[:2] == [
        ("shop", "pk_shop", "PK", "PRIMARY_KEY_CONSTRAINT", 1, False, True),
        ("shop", "uq_shop_sku", "UQ", "UNIQUE_CONSTRAINT", 2, False, True),
    ]
    (pk, uq) = keys[2:]
    assert pk[:1] == uq[:1] == ("tags",)
    assert pk[1].startswith("PK__tags__") and pk[2:] == (
        "PK",
        "PRIMARY_KEY_CONSTRAINT",
        1,
        True,
        True,
    )
    assert uq[1].startswith("UQ__tags__") and uq[2:] == ("UQ", "UNIQUE_CONSTRAINT", 2, True, True)
    objects = _rows(
        conn,
        "SELECT o.type, o.type_desc, o.parent_object_id FROM sys.objects AS o "
        "JOIN sys.key_constraints AS k ON k.object_id = o.object_id WHERE k.name = 'pk_shop'",
    )
    table_id = conn.execute("SELECT OBJECT_ID('dbo.shop')").fetchone()[0]
    assert objects == [("PK", "PRIMARY_KEY_CONSTRAINT", table_id)]


def test_default_constraints_in_sql_servers_text(conn: Connection) -> None:
    """Numbers in two pairs of parentheses, strings and functions in one; sys.columns points at
    them; INFORMATION_SCHEMA.COLUMNS shows them; ALTER TABLE adds and drops them."""
    conn.execute(SHOP_DDL)
    defaults = _rows(
        conn,
        "SELECT c.name AS column_name, d.name, d.definition, d.is_system_named, d.type, "
        "d.type_desc FROM sys.default_constraints AS d JOIN sys.columns AS c "
        "ON c.object_id = d.parent_object_id AND c.column_id = d.parent_column_id "
        "AND c.default_object_id = d.object_id ORDER BY c.column_id",
    )
    assert [(c, text, named) for c, _, text, named, _, _ in defaults] == [
        ("qty", "((0))", True),
        ("label", "(N'new')", False),
        ("note", "('x')", True),
        ("price", "((-1.5))", True),
        ("stamp", "(getutcdate())", True),
        ("gone", "(NULL)", True),
    ]
    assert defaults[0][1].startswith("DF__shop__qty__") and defaults[1][1] == "df_shop_label"
    assert {(t, d) for *_, t, d in defaults} == {("D ", "DEFAULT_CONSTRAINT")}
    conn.execute("ALTER TABLE dbo.shop ADD flag bit NOT NULL DEFAULT 1")
    conn.execute("ALTER TABLE dbo.shop DROP COLUMN note")
    shown = _rows(
        conn,
        "SELECT COLUMN_NAME, COLUMN_DEFAULT FROM INFORMATION_SCHEMA.COLUMNS "
        "WHERE TABLE_NAME = 'shop' ORDER BY ORDINAL_POSITION",
    )
    assert shown == [
        ("id", None),
        ("line no", None),
        ("sku", None),
        ("qty", "((0))"),
        ("label", "(N'new')"),
        ("price", "((-1.5))"),
        ("stamp", "(getutcdate())"),
        ("gone", "(NULL)"),
        ("flag", "((1))"),
    ]
    with_default = _value(
        conn,
        "SELECT COUNT(*) FROM sys.columns WHERE object_id = OBJECT_ID('dbo.shop') "
        "AND default_object_id <> 0",
    )
    assert with_default == 6
    conn.execute("INSERT INTO dbo.shop (id, [line no], sku) VALUES (1, 1, 'a')")
    assert _rows(conn, "SELECT qty, label, price, flag FROM dbo.shop") == [
        (0, "new", pytest.approx(-1.5), True)
    ]


def test_index_ddl_errors_as_sql_server(conn: Connection) -> None:
    conn.execute(SHOP_DDL)
    conn.execute("CREATE INDEX ix_qty ON dbo.shop (qty)")
    with pytest.raises(emulator.Error, match=r"index or statistics with name 'ix_qty'.*\(1913\)"):
        conn.execute("CREATE INDEX ix_qty ON dbo.shop (label)")
    with pytest.raises(emulator.Error, match=r"The index 'ix_qty' is dependent on.*\(5074\)"):
        conn.execute("ALTER TABLE dbo.shop DROP COLUMN qty")
    with pytest.raises(emulator.Error, match=r"UNIQUE KEY constraint enforcement.*\(3723\)"):
        conn.execute("DROP INDEX uq_shop_sku ON dbo.shop")
    with pytest.raises(emulator.Error, match=r"Cannot drop the index 'dbo.shop.ix_no'.*\(3701\)"):
        conn.execute("DROP INDEX ix_no ON dbo.shop")
    conn.execute("DROP INDEX IF EXISTS ix_no ON dbo.shop")
    conn.execute("DROP INDEX ix_qty ON dbo.shop")
    conn.execute("ALTER TABLE dbo.shop DROP COLUMN qty")
    names = _rows(
        conn, "SELECT name FROM sys.indexes WHERE object_id = OBJECT_ID('dbo.shop') ORDER BY 1"
    )
    assert names == [("pk_shop",), ("uq_shop_sku",)]
    conn.execute("DROP TABLE dbo.shop")
    for view in ("sys.indexes", "sys.index_columns", "sys.key_constraints"):
        assert _value(conn, f"SELECT COUNT(*) FROM {view}") == 0


def test_foreign_keys_are_checked_not_kept_and_the_empty_views(conn: Connection) -> None:
    """REFERENCES / FOREIGN KEY (setup scripts declare them: deploy/sqlserver/init.sql) are
    accepted when what they reference exists (1767 / 1770 otherwise), and neither enforced nor
    listed: sys.foreign_keys stays empty, as do the views of computed columns and extended
    properties, which the emulator has none of."""
    conn.execute("CREATE TABLE dbo.parent (id int PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE dbo.child (id int PRIMARY KEY, parent_id int REFERENCES dbo.parent (id))"
    )
    conn.execute(
        "CREATE TABLE dbo.child2 (id int PRIMARY KEY, parent_id int, "
        "CONSTRAINT fk_child FOREIGN KEY (parent_id) REFERENCES dbo.parent (id))"
    )
    with pytest.raises(emulator.Error, match=r"references invalid table.*\(1767\)"):
        conn.execute("CREATE TABLE dbo.c3 (id int PRIMARY KEY, p int REFERENCES dbo.nosuch (id))")
    with pytest.raises(emulator.Error, match=r"invalid column 'nope'.*\(1770\)"):
        conn.execute("CREATE TABLE dbo.c4 (id int PRIMARY KEY, p int REFERENCES dbo.parent (nope))")
    conn.execute("INSERT INTO dbo.child (id, parent_id) VALUES (1, 99)")  # not enforced
    for view in (
        "sys.foreign_keys",
        "sys.foreign_key_columns",
        "sys.computed_columns",
        "sys.extended_properties",
    ):
        assert _value(conn, f"SELECT COUNT(*) FROM {view}") == 0


def test_identity_columns_seed_increment_and_last_value(conn: Connection) -> None:
    conn.execute("CREATE TABLE dbo.ticket (id int IDENTITY(1,1) PRIMARY KEY, body nvarchar(10))")
    query = (
        "SELECT name, is_identity, CAST(seed_value AS numeric(38,0)), "
        "CAST(increment_value AS numeric(38,0)), CAST(last_value AS numeric(38,0)) "
        "FROM sys.identity_columns WHERE object_id = OBJECT_ID('dbo.ticket')"
    )
    assert _rows(conn, query) == [("id", True, 1, 1, None)]
    conn.execute("INSERT INTO dbo.ticket (body) VALUES (N'a'), (N'b')")
    assert _rows(conn, query) == [("id", True, 1, 1, 2)]


AGENT_RUNNING = (
    "SELECT CASE WHEN dss.[status] = 4 THEN 1 ELSE 0 END AS isRunning "
    "FROM sys.dm_server_services dss WHERE dss.[servicename] LIKE N'SQL Server Agent (%'"
)


def test_server_services_show_the_agent_running_with_the_capture_job(orders: Connection) -> None:
    """What CDC consumers ask before reading changes: is the SQL Server Agent running. The
    emulator's agent runs while the capture job runs (sp_cdc_stop_job / sp_cdc_start_job)."""
    services = _rows(
        orders,
        "SELECT servicename, startup_type_desc, status, status_desc, is_clustered "
        "FROM sys.dm_server_services ORDER BY servicename",
    )
    assert services == [
        ("SQL Server (MSSQLSERVER)", "Automatic", 4, "Running", "N"),
        ("SQL Server Agent (MSSQLSERVER)", "Automatic", 4, "Running", "N"),
    ]
    assert _value(orders, AGENT_RUNNING) == 1
    started = orders.execute(
        "SELECT last_startup_time FROM sys.dm_server_services "
        "WHERE servicename LIKE 'SQL Server A%'"
    ).fetchone()[0]
    assert started is not None and started.utcoffset() is not None
    orders.execute("EXEC sys.sp_cdc_stop_job @job_type = N'capture'")
    assert _value(orders, AGENT_RUNNING) == 0
    status = _value(
        orders,
        "SELECT status_desc FROM sys.dm_server_services WHERE servicename LIKE 'SQL Server A%'",
    )
    assert status == "Stopped"
    orders.execute("EXEC sys.sp_cdc_start_job @job_type = N'capture'")
    assert _value(orders, AGENT_RUNNING) == 1


CHANGE_TABLE_KEYS = ["__$start_lsn", "__$command_id", "__$seqval", "__$operation"]


def test_a_change_table_has_its_clustered_index(orders: Connection) -> None:
    """sp_cdc_enable_table gives the change table SQL Server's unique clustered index
    ``<capture_instance>_CT_clustered_idx`` on (__$start_lsn, __$command_id, __$seqval,
    __$operation): not a heap, and listed by sp_helpindex and sys.partitions too."""
    ct = "OBJECT_ID('cdc.dbo_orders_CT')"
    assert _rows(
        orders,
        "SELECT name, index_id, type, type_desc, is_unique, is_primary_key, "
        f"is_unique_constraint FROM sys.indexes WHERE object_id = {ct} ORDER BY index_id",
    ) == [("dbo_orders_CT_clustered_idx", 1, 1, "CLUSTERED", True, False, False)]
    keys = _rows(
        orders,
        "SELECT c.name, ic.key_ordinal, ic.is_descending_key FROM sys.index_columns AS ic "
        "JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
        f"WHERE ic.object_id = {ct} AND ic.index_id = 1 ORDER BY ic.key_ordinal",
    )
    assert keys == [(name, n, False) for n, name in enumerate(CHANGE_TABLE_KEYS, start=1)]
    assert _rows(orders, "EXEC sp_helpindex N'cdc.dbo_orders_CT'") == [
        (
            "dbo_orders_CT_clustered_idx",
            "clustered, unique located on PRIMARY",
            ", ".join(CHANGE_TABLE_KEYS),
        )
    ]
    assert _rows(orders, f"SELECT index_id FROM sys.partitions WHERE object_id = {ct}") == [(1,)]


def test_a_file_made_before_these_views_gets_them_and_its_keys(db_path: Path) -> None:
    """An older database file (no constraint or index bookkeeping, no views) gets the views when
    opened, with its primary keys, UNIQUE constraints (named as SQL Server names unnamed ones:
    the file kept no name) and CREATE INDEX indexes recorded; sp_helpindex lists the same."""
    conn = emulator.connect(db_path, autocommit=True)
    conn.execute(SHOP_DDL)
    conn.execute("CREATE INDEX ix_qty ON dbo.shop (qty DESC)")
    conn.close()
    raw = sqlite3.connect(db_path)
    for view in (
        "sys.indexes",
        "sys.index_columns",
        "sys.key_constraints",
        "sys.dm_server_services",
    ):
        raw.execute(f'DROP VIEW "{view}"')
    for table in ("_emu_constraints", "_emu_indexes", "_emu_index_columns"):
        raw.execute(f"DELETE FROM {table}")
    raw.commit()
    raw.close()
    conn = emulator.connect(db_path, autocommit=True)
    keys = _rows(conn, "SELECT name, type, is_system_named FROM sys.key_constraints")
    assert keys[0] == ("pk_shop", "PK", False)
    ((unique, kind, system_named),) = keys[1:]
    assert unique.startswith("UQ__shop__") and (kind, system_named) == ("UQ", True)
    assert _rows(
        conn,
        "SELECT i.name, ic.column_id, ic.is_descending_key FROM sys.indexes AS i "
        "JOIN sys.index_columns AS ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id "
        "ORDER BY i.index_id, ic.key_ordinal",
    ) == [
        ("pk_shop", 1, False),
        ("pk_shop", 2, False),
        (unique, 3, False),
        ("ix_qty", 4, True),
    ]
    assert _rows(conn, "EXEC sp_helpindex N'dbo.shop'") == [
        ("ix_qty", "nonclustered located on PRIMARY", "qty(-)"),
        ("pk_shop", "clustered, unique, primary key located on PRIMARY", "id, line no"),
        (unique, "nonclustered, unique, unique key located on PRIMARY", "sku"),
    ]
    assert _value(conn, "SELECT COUNT(*) FROM sys.dm_server_services") == 2
    conn.close()
    # upgraded again (a view missing): nothing is recorded twice
    raw = sqlite3.connect(db_path)
    raw.execute('DROP VIEW "sys.dm_server_services"')
    raw.commit()
    raw.close()
    conn = emulator.connect(db_path, autocommit=True)
    assert _value(conn, "SELECT COUNT(*) FROM sys.dm_server_services") == 2
    assert _rows(conn, "SELECT name, type, is_system_named FROM sys.key_constraints") == keys
    conn.close()


def test_a_change_table_made_before_its_index_was_kept_gets_it(db_path: Path) -> None:
    """A file whose change table was recorded as a heap, with the sys.indexes of that time (a
    view stored with another definition), gets the clustered index and today's views when
    opened; opened again, nothing is recorded twice."""
    conn = emulator.connect(db_path, autocommit=True)
    conn.execute(ORDERS_DDL)
    enable_cdc(conn)
    conn.close()
    raw = sqlite3.connect(db_path)
    raw.execute("DELETE FROM _emu_indexes WHERE index_id = 1")
    raw.execute("DELETE FROM _emu_index_columns WHERE index_id = 1")
    raw.execute('DROP VIEW "sys.indexes"')
    raw.execute('CREATE VIEW "sys.indexes" AS SELECT 1 AS object_id WHERE 0')
    raw.commit()
    raw.close()
    for _ in range(2):
        conn = emulator.connect(db_path, autocommit=True)
        assert _rows(
            conn,
            "SELECT name, index_id, type_desc FROM sys.indexes "
            "WHERE object_id = OBJECT_ID('cdc.dbo_orders_CT')",
        ) == [("dbo_orders_CT_clustered_idx", 1, "CLUSTERED")]
        assert _value(
            conn,
            "SELECT COUNT(*) FROM sys.index_columns "
            "WHERE object_id = OBJECT_ID('cdc.dbo_orders_CT')",
        ) == len(CHANGE_TABLE_KEYS)
        assert _rows(conn, "EXEC sp_helpindex N'cdc.dbo_orders_CT'")[0][0] == (
            "dbo_orders_CT_clustered_idx"
        )
        conn.close()
    raw = sqlite3.connect(db_path)
    assert not system_views.stale_views(
        dict(raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
    )
    raw.close()
