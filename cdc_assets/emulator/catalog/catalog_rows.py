"""Writing the catalog's bookkeeping rows: tables and their columns, capture instances, and the
constraints and indexes behind ``sys.key_constraints``, ``sys.default_constraints`` and
``sys.indexes`` (:mod:`.constraint_views`).

DDL (:mod:`.ddl`) and the CDC procedures (:mod:`.cdc_procedures`) change the catalog through these;
they run inside the statement's write transaction, and the caller then marks the catalog changed
(``storage.bump_catalog`` with the object ids touched).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..values import types as T
from ..values.types import SqlType
from . import storage
from .catalog import CaptureInstance
from .constraint_rows import add_constraint, record_change_table_index, record_primary_key
from .storage import quote


def insert_table(
    db: sqlite3.Connection,
    oid: int,
    schema_id: int,
    name: str,
    physical: str,
    columns: Sequence[tuple[str, SqlType, bool, bool]],
    *,
    shipped: bool,
    pk_name: str | None,
) -> None:
    """Record a table (``shipped``: a change table) and its ``(name, type, nullable, identity)``
    columns, numbered from 1, and its PRIMARY KEY constraint when ``pk_name`` is given (the
    caller records the key's columns)."""
    now = T.DATETIME.encode(storage.now())
    db.execute(
        "INSERT INTO _emu_objects (object_id, schema_id, name, type, physical, create_date, "
        "modify_date, is_ms_shipped, is_tracked_by_cdc, pk_name, next_column_id) "
        "VALUES (?, ?, ?, 'U', ?, ?, ?, ?, 0, ?, ?)",
        (oid, schema_id, name, physical, now, now, 1 if shipped else 0, pk_name, len(columns) + 1),
    )
    for cid, (column, sql_type, nullable, identity) in enumerate(columns, start=1):
        insert_column(db, oid, cid, column, sql_type, nullable, identity)
    if pk_name is not None:
        record_primary_key(db, oid, pk_name, system_named=pk_name.startswith("PK__"), at=now)


def insert_change_table(
    db: sqlite3.Connection,
    oid: int,
    schema_id: int,
    name: str,
    physical: str,
    columns: Sequence[tuple[str, SqlType, bool]],
) -> None:
    """Record a change table ``cdc.<capture_instance>_CT`` and its ``(name, type, nullable)``
    columns, with the unique clustered index SQL Server gives it,
    ``<capture_instance>_CT_clustered_idx`` (:data:`.constraint_rows.CHANGE_TABLE_INDEX_KEYS`)."""
    insert_table(
        db,
        oid,
        schema_id,
        name,
        physical,
        [(n, t, nullable, False) for n, t, nullable in columns],
        shipped=True,
        pk_name=None,
    )
    record_change_table_index(db, oid)


def insert_column(
    db: sqlite3.Connection,
    oid: int,
    cid: int,
    name: str,
    sql_type: SqlType,
    nullable: bool,
    identity: bool = False,
) -> None:
    db.execute(
        "INSERT INTO _emu_columns (object_id, column_id, name, type_name, type_sql, max_length, "
        "precision, scale, is_nullable, is_identity) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            oid,
            cid,
            name,
            sql_type.name,
            sql_type.sql,
            sql_type.max_length,
            sql_type.sys_precision,
            sql_type.sys_scale,
            1 if nullable else 0,
            1 if identity else 0,
        ),
    )


def delete_table(db: sqlite3.Connection, oid: int) -> None:
    """Remove a table's rows from the catalog (its SQLite table is dropped by the caller)."""
    for table in (
        "_emu_objects",
        "_emu_columns",
        "_emu_key_columns",
        "_emu_indexes",
        "_emu_index_columns",
    ):
        db.execute(f"DELETE FROM {table} WHERE object_id = ?", (oid,))
    db.execute("DELETE FROM _emu_constraints WHERE parent_object_id = ?", (oid,))


def drop_instance(db: sqlite3.Connection, instance: CaptureInstance) -> None:
    """Remove a capture instance: its change table and metadata."""
    db.execute(f"DROP TABLE IF EXISTS {quote(instance.change_table)}")
    for table in (
        '"cdc.change_tables"',
        '"cdc.captured_columns"',
        '"cdc.index_columns"',
        '"cdc.ddl_history"',
        "_emu_instances",
    ):
        db.execute(f"DELETE FROM {table} WHERE object_id = ?", (instance.object_id,))
    delete_table(db, instance.object_id)


# -- constraints and indexes (sys.key_constraints, sys.default_constraints, sys.indexes) ---------


def record_default(
    db: sqlite3.Connection,
    table_id: int,
    column_id: int,
    name: str,
    definition: str,
    *,
    system_named: bool,
) -> None:
    """A DEFAULT constraint, ``definition`` in SQL Server's text form (``((0))``)."""
    add_constraint(
        db,
        table_id,
        "D",
        name,
        system_named=system_named,
        column_id=column_id,
        definition=definition,
    )


def delete_index(db: sqlite3.Connection, table_id: int, index_id: int) -> None:
    for table in ("_emu_indexes", "_emu_index_columns"):
        db.execute(
            f"DELETE FROM {table} WHERE object_id = ? AND index_id = ?", (table_id, index_id)
        )


def delete_column_default(db: sqlite3.Connection, table_id: int, column_id: int) -> None:
    db.execute(
        "DELETE FROM _emu_constraints WHERE parent_object_id = ? AND parent_column_id = ? "
        "AND type = 'D'",
        (table_id, column_id),
    )
