"""Constraint and index rows: what ``sys.key_constraints``, ``sys.indexes`` and the others of
:mod:`.constraint_views` show (``_emu_constraints``, ``_emu_indexes``, ``_emu_index_columns``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..values import types as T
from .storage import next_object_id, now


def add_constraint(
    db: sqlite3.Connection,
    parent: int,
    kind: str,
    name: str,
    *,
    system_named: bool,
    column_id: int = 0,
    definition: str | None = None,
    at: str | None = None,
) -> int:
    oid = next_object_id(db)
    db.execute(
        "INSERT INTO _emu_constraints (object_id, parent_object_id, type, name, "
        "parent_column_id, definition, is_system_named, create_date) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            oid,
            parent,
            kind,
            name,
            column_id,
            definition,
            1 if system_named else 0,
            at or T.DATETIME.encode(now()),
        ),
    )
    return oid


def record_primary_key(
    db: sqlite3.Connection, table_id: int, name: str, *, system_named: bool, at: str | None = None
) -> None:
    """The PRIMARY KEY constraint of a table (its columns are ``_emu_key_columns``)."""
    add_constraint(db, table_id, "PK", name, system_named=system_named, at=at)


def record_index(
    db: sqlite3.Connection,
    table_id: int,
    name: str,
    columns: Sequence[tuple[int, bool]],
    unique: bool,
    *,
    constraint: str | None = None,
    system_named: bool = False,
) -> int:
    """A nonclustered index on ``(column_id, descending)`` columns (``constraint``: the UNIQUE
    constraint it enforces, recorded too); returns its index_id (2 and up)."""
    (index_id,) = db.execute(
        "SELECT MAX(COALESCE(MAX(index_id), 1), 1) + 1 FROM _emu_indexes WHERE object_id = ?",
        (table_id,),
    ).fetchone()
    constraint_id = None
    if constraint is not None:
        constraint_id = add_constraint(db, table_id, "UQ", constraint, system_named=system_named)
    db.execute(
        "INSERT INTO _emu_indexes (object_id, index_id, name, is_unique, constraint_id) "
        "VALUES (?, ?, ?, ?, ?)",
        (table_id, index_id, constraint or name, 1 if unique else 0, constraint_id),
    )
    db.executemany(
        "INSERT INTO _emu_index_columns (object_id, index_id, key_ordinal, column_id, "
        "is_descending_key) VALUES (?, ?, ?, ?, ?)",
        [
            (table_id, index_id, ordinal, column_id, 1 if desc else 0)
            for ordinal, (column_id, desc) in enumerate(columns, start=1)
        ],
    )
    return int(index_id)


# SQL Server's clustered index of a change table (with __$command_id, as since SQL Server 2016 SP2)
CHANGE_TABLE_INDEX_KEYS = ("__$start_lsn", "__$command_id", "__$seqval", "__$operation")


def record_change_table_index(db: sqlite3.Connection, table_id: int) -> None:
    """The unique clustered index ``<capture_instance>_CT_clustered_idx`` (index_id 1) of the
    change table ``table_id``, unless recorded already."""
    if db.execute(
        "SELECT 1 FROM _emu_indexes WHERE object_id = ? AND index_id = 1", (table_id,)
    ).fetchone():
        return
    (name,) = db.execute(
        "SELECT name FROM _emu_objects WHERE object_id = ?", (table_id,)
    ).fetchone()
    columns = dict(
        db.execute("SELECT name, column_id FROM _emu_columns WHERE object_id = ?", (table_id,))
    )
    db.execute(
        "INSERT INTO _emu_indexes (object_id, index_id, name, is_unique, constraint_id) "
        "VALUES (?, 1, ?, 1, NULL)",
        (table_id, f"{name}_clustered_idx"),
    )
    db.executemany(
        "INSERT INTO _emu_index_columns (object_id, index_id, key_ordinal, column_id, "
        "is_descending_key) VALUES (?, 1, ?, ?, 0)",
        [
            (table_id, ordinal, columns[key])
            for ordinal, key in enumerate(
                (k for k in CHANGE_TABLE_INDEX_KEYS if k in columns), start=1
            )
        ],
    )
