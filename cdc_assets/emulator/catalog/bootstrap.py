"""A database file made ready to use: the layout created in an empty file, brought up to date in
an older one (the tables and views added since it was made, its keys and indexes recorded).
"""

from __future__ import annotations

import secrets
import sqlite3

from ..values import types as T
from .constraint_rows import record_change_table_index, record_index, record_primary_key
from .storage import (
    ADDED_DDL,
    FIRST_LSN,
    FIRST_OBJECT_ID,
    INTERNAL_DDL,
    SCHEMA_IDS,
    create_table_sql,
    new_token,
    now,
    quote,
)
from .system_objects import SYSTEM_OBJECTS
from .system_views import VIEWS, stale_views, view_sql


def bootstrap(db: sqlite3.Connection) -> None:
    """Create the internal layout in an empty database file (idempotent, multi-process safe)."""
    # every view is compared with its definition, so a file lacking one (made before it was
    # added, or with one dropped) or holding an older definition of one is upgraded
    stored = dict(
        db.execute(
            "SELECT name, sql FROM sqlite_master "
            "WHERE type = 'view' OR name IN ('_emu_state', '_emu_catalog_changes')"
        )
    )
    if "_emu_state" in stored:
        if "_emu_catalog_changes" not in stored or stale_views(stored):
            _add_tables(db)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_emu_state'"
        ).fetchone():
            db.execute("COMMIT")
            return
        for statement in (INTERNAL_DDL + ADDED_DDL).strip().split(";"):
            if statement.strip():
                db.execute(statement)
        created = T.DATETIME.encode(now())
        db.executemany(
            "INSERT INTO _emu_meta (key, value) VALUES (?, ?)",
            [
                ("db_guid", secrets.token_hex(8)),
                ("create_date", created),
                ("cdc_enabled", 0),
                ("allow_snapshot", 0),
            ],
        )
        db.executemany(
            "INSERT INTO _emu_schemas (schema_id, name) VALUES (?, ?)",
            [(sid, name) for name, sid in SCHEMA_IDS.items()],
        )
        db.executemany(
            "INSERT INTO _emu_types VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(name, *row) for name, row in T.SYS_TYPES.items()],
        )
        for obj in SYSTEM_OBJECTS:
            if obj.requires_cdc:
                continue
            if obj.physical in VIEWS:
                db.execute(view_sql(obj.physical))
            else:
                db.execute(create_table_sql(obj.physical, obj.columns))
        db.execute(
            "CREATE TABLE _emu_state (id INTEGER PRIMARY KEY CHECK (id = 1), "
            "catalog_token INTEGER NOT NULL, last_lsn INTEGER NOT NULL, "
            "last_tran_id INTEGER NOT NULL, captured_lsn INTEGER NOT NULL, "
            "next_object_id INTEGER NOT NULL, next_session_id INTEGER NOT NULL)"
        )
        db.execute(
            "INSERT INTO _emu_state VALUES (1, ?, ?, 0, ?, ?, 1)",
            (new_token(), FIRST_LSN, FIRST_LSN, FIRST_OBJECT_ID),
        )
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _add_tables(db: sqlite3.Connection) -> None:
    """Create the tables and views added to the layout since ``db`` was made, make again the
    views whose definition changed, and record what older files did not keep: their keys and
    indexes, their change tables' clustered indexes."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in ADDED_DDL.strip().split(";"):
            if statement.strip():
                db.execute(statement)
        stored = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
        for name in stale_views(stored):
            db.execute(f"DROP VIEW IF EXISTS {quote(name)}")
            db.execute(view_sql(name))
        _record_existing_keys_and_indexes(db)
        for (oid,) in db.execute("SELECT object_id FROM _emu_instances").fetchall():
            record_change_table_index(db, oid)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _record_existing_keys_and_indexes(db: sqlite3.Connection) -> None:
    """Give a file made before ``_emu_constraints`` its primary keys' constraint rows, its
    UNIQUE constraints' rows (their names were not kept: named as SQL Server names an unnamed
    one) and its ``CREATE INDEX`` indexes' rows (their DEFAULT definitions were not kept: none
    are listed)."""
    for oid, pk_name, created in db.execute(
        "SELECT object_id, pk_name, create_date FROM _emu_objects AS o "
        "WHERE pk_name IS NOT NULL AND NOT EXISTS (SELECT 1 FROM _emu_constraints AS k "
        "WHERE k.parent_object_id = o.object_id AND k.type = 'PK')"
    ).fetchall():
        record_primary_key(db, oid, pk_name, system_named=pk_name.startswith("PK__"), at=created)
    tables = dict(
        db.execute("SELECT physical, object_id FROM _emu_objects WHERE is_ms_shipped = 0")
    )
    for physical, oid in tables.items():
        _record_existing_unique_constraints(db, physical, oid)
    for name, table in db.execute(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    ).fetchall():
        oid = tables.get(table)
        if oid is None or not name.startswith(f"{table}."):
            continue
        index_name = name[len(table) + 1 :]
        if db.execute(
            "SELECT 1 FROM _emu_indexes WHERE object_id = ? AND name = ?", (oid, index_name)
        ).fetchone():
            continue
        (unique,) = db.execute(
            'SELECT "unique" FROM pragma_index_list(?) WHERE name = ?', (table, name)
        ).fetchone()
        record_index(db, oid, index_name, _index_column_ids(db, name, oid), bool(unique))


def _index_column_ids(db: sqlite3.Connection, index: str, oid: int) -> list[tuple[int, bool]]:
    """The ``(column_id, descending)`` keys of the SQLite index ``index`` on table ``oid``."""
    return [
        (int(c), bool(d))
        for c, d in db.execute(
            'SELECT c.column_id, x."desc" FROM pragma_index_xinfo(?) AS x '
            "JOIN _emu_columns AS c ON c.object_id = ? AND c.name = x.name "
            "WHERE x.key ORDER BY x.seqno",
            (index, oid),
        )
    ]


def _record_existing_unique_constraints(db: sqlite3.Connection, physical: str, oid: int) -> None:
    """The UNIQUE constraints of table ``oid`` (SQLite's automatic indexes) not recorded yet."""
    keys: dict[int, list[int]] = {}
    for index_id, column_id in db.execute(
        "SELECT i.index_id, c.column_id FROM _emu_indexes AS i "
        "JOIN _emu_index_columns AS c ON c.object_id = i.object_id AND c.index_id = i.index_id "
        "WHERE i.object_id = ? AND i.constraint_id IS NOT NULL ORDER BY i.index_id, c.key_ordinal",
        (oid,),
    ):
        keys.setdefault(int(index_id), []).append(int(column_id))
    recorded = {tuple(columns) for columns in keys.values()}
    (table,) = db.execute("SELECT name FROM _emu_objects WHERE object_id = ?", (oid,)).fetchone()
    for index, origin in db.execute(
        "SELECT name, origin FROM pragma_index_list(?) ORDER BY seq DESC", (physical,)
    ).fetchall():
        columns = _index_column_ids(db, index, oid)
        if origin != "u" or not columns or tuple(c for c, _ in columns) in recorded:
            continue
        (next_id,) = db.execute("SELECT next_object_id FROM _emu_state").fetchone()
        name = f"UQ__{table[:8]}__{int(next_id):X}"
        record_index(db, oid, "", columns, True, constraint=name, system_named=True)
