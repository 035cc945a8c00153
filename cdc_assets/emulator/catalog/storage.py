"""The SQLite file layout: internal bookkeeping tables, names, the catalog token, object ids.

The system tables and views are defined in :mod:`.system_objects` and :mod:`.system_views`;
:mod:`.bootstrap` creates the layout in a new file and brings an older file's up to date.

SQLite has no schemas, so every SQL Server object lives in one SQLite table whose name is the
dotted SQL Server name: ``[dbo].[orders]`` is ``"dbo.orders"``, ``cdc.change_tables`` is
``"cdc.change_tables"``, ``msdb.dbo.cdc_jobs`` is ``"msdb.dbo.cdc_jobs"``. Emulator bookkeeping
tables start with ``_emu_`` and are never reachable from T-SQL.

Bookkeeping:

- ``_emu_state`` (one row): ``catalog_token`` (a random value replaced by every DDL, so cached
  translations never outlive the schema they were made for), ``last_lsn`` (the last LSN handed out,
  an 80-bit LSN kept as an integer), ``last_tran_id``, ``captured_lsn`` (the capture job's
  position), ``next_object_id``, ``next_session_id``.
- ``_emu_meta``: database-level settings (``cdc_enabled``, ``allow_snapshot``, ``create_date``).
- ``_emu_schemas``, ``_emu_objects``, ``_emu_columns``, ``_emu_key_columns``: the catalog behind
  ``sys.schemas``, ``sys.tables``, ``sys.columns`` and the primary keys.
- ``_emu_constraints``: PRIMARY KEY, UNIQUE and DEFAULT constraints (object id, name, a
  default's definition text); ``_emu_indexes``, ``_emu_index_columns``: the indexes other than
  primary keys (UNIQUE constraints and ``CREATE INDEX``, index_id 2 and up; a change table's
  clustered index, index_id 1). Behind the views of :mod:`.constraint_views`,
  written by :mod:`.constraint_rows`.
- ``_emu_instances``: per capture instance what SQL Server keeps in the log (creation LSN, the
  source column ids it captures).
- ``_emu_transactions``: committed transactions that wrote change-log rows, waiting for capture;
  ``_emu_transaction_tables``: which tracked tables each of them wrote (capture reads only those).
- ``_emu_catalog_changes``: per catalog change (``catalog_token``) the objects it touched, so
  connections reread only those (:func:`.catalog.refresh`).
- ``_emu_ddl_log``: DDL on tracked tables, waiting for capture into ``cdc.ddl_history``.
- ``_emu_jobs``: whether the capture / cleanup agent jobs are running, since when.
- ``_emu_log_<object_id>``: the transaction log of one tracked table (see :mod:`.transaction_log`).
"""

from __future__ import annotations

import datetime as dt
import secrets
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from ..values.types import SqlType
from .system_objects import CDC_OBJECT_NAMES

DATABASE_ID = 5
FIRST_LSN = (0x2A << 48) | (0x100 << 16) | 1
FIRST_OBJECT_ID = 1_013_578_649
LSN_STEP = 16

SCHEMA_IDS = {"dbo": 1, "guest": 2, "INFORMATION_SCHEMA": 3, "sys": 4}
CDC_SCHEMA_ID = 5

INTERNAL_DDL = """
CREATE TABLE IF NOT EXISTS _emu_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _emu_schemas (
    schema_id INTEGER PRIMARY KEY, name TEXT COLLATE NOCASE NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS _emu_objects (
    object_id INTEGER PRIMARY KEY, schema_id INTEGER NOT NULL, name TEXT COLLATE NOCASE NOT NULL,
    type TEXT NOT NULL, physical TEXT NOT NULL, create_date EMU_DT TEXT,
    modify_date EMU_DT TEXT, is_ms_shipped EMU_BIT INTEGER NOT NULL DEFAULT 0,
    is_tracked_by_cdc EMU_BIT INTEGER NOT NULL DEFAULT 0, pk_name TEXT,
    next_column_id INTEGER NOT NULL DEFAULT 1, UNIQUE (schema_id, name));
CREATE TABLE IF NOT EXISTS _emu_columns (
    object_id INTEGER NOT NULL, column_id INTEGER NOT NULL, name TEXT COLLATE NOCASE NOT NULL,
    type_name TEXT NOT NULL, type_sql TEXT NOT NULL, max_length INTEGER, precision INTEGER,
    scale INTEGER, is_nullable EMU_BIT INTEGER NOT NULL, is_identity EMU_BIT INTEGER NOT NULL,
    PRIMARY KEY (object_id, column_id));
CREATE TABLE IF NOT EXISTS _emu_key_columns (
    object_id INTEGER NOT NULL, column_id INTEGER NOT NULL, key_ordinal INTEGER NOT NULL,
    PRIMARY KEY (object_id, key_ordinal));
CREATE TABLE IF NOT EXISTS _emu_instances (
    object_id INTEGER PRIMARY KEY, capture_instance TEXT COLLATE NOCASE NOT NULL UNIQUE,
    source_object_id INTEGER NOT NULL, create_lsn INTEGER NOT NULL, column_ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _emu_transactions (
    lsn INTEGER PRIMARY KEY, tran_id INTEGER NOT NULL, begin_time TEXT, end_time TEXT,
    begin_lsn INTEGER);
CREATE TABLE IF NOT EXISTS _emu_ddl_log (
    id INTEGER PRIMARY KEY, lsn INTEGER, source_object_id INTEGER NOT NULL,
    ddl_command TEXT NOT NULL, ddl_time TEXT NOT NULL, required_column_update INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS _emu_ddl_log_lsn ON _emu_ddl_log (lsn);
CREATE TABLE IF NOT EXISTS _emu_jobs (
    job_type TEXT PRIMARY KEY, running INTEGER NOT NULL, start_count INTEGER NOT NULL,
    start_time TEXT, stop_time TEXT);
CREATE TABLE IF NOT EXISTS _emu_types (
    name TEXT PRIMARY KEY, system_type_id INTEGER, user_type_id INTEGER, max_length INTEGER,
    precision INTEGER, scale INTEGER, is_nullable INTEGER);
"""

# added after the first layout: created in older database files when they are opened
ADDED_DDL = """
CREATE TABLE IF NOT EXISTS _emu_transaction_tables (
    lsn INTEGER NOT NULL, object_id INTEGER NOT NULL, PRIMARY KEY (lsn, object_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _emu_catalog_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL, object_id INTEGER);
CREATE TABLE IF NOT EXISTS _emu_constraints (
    object_id INTEGER PRIMARY KEY, parent_object_id INTEGER NOT NULL, type TEXT NOT NULL,
    name TEXT COLLATE NOCASE NOT NULL, parent_column_id INTEGER NOT NULL DEFAULT 0,
    definition TEXT, is_system_named INTEGER NOT NULL, create_date TEXT);
CREATE INDEX IF NOT EXISTS _emu_constraints_parent ON _emu_constraints (parent_object_id);
CREATE TABLE IF NOT EXISTS _emu_indexes (
    object_id INTEGER NOT NULL, index_id INTEGER NOT NULL, name TEXT COLLATE NOCASE NOT NULL,
    is_unique INTEGER NOT NULL, constraint_id INTEGER, PRIMARY KEY (object_id, index_id))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS _emu_index_columns (
    object_id INTEGER NOT NULL, index_id INTEGER NOT NULL, key_ordinal INTEGER NOT NULL,
    column_id INTEGER NOT NULL, is_descending_key INTEGER NOT NULL,
    PRIMARY KEY (object_id, index_id, key_ordinal)) WITHOUT ROWID;
"""


def quote(name: str) -> str:
    """Quote a SQLite identifier."""
    return '"' + name.replace('"', '""') + '"'


def create_table_sql(physical: str, columns: tuple[tuple[str, SqlType], ...]) -> str:
    body = ", ".join(f"{quote(name)} {t.decltype}" for name, t in columns)
    return f"CREATE TABLE {quote(physical)} ({body})"


def now() -> dt.datetime:
    """The server clock (local time, like GETDATE())."""
    return dt.datetime.now()


def is_emulator_database(path: str | Path) -> bool:
    """``path`` is a file this emulator created (read without changing it)."""
    try:
        db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            found = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_emu_state'"
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return False
    return found is not None


def new_token() -> int:
    return secrets.randbits(62)


CATALOG_CHANGES_KEPT = 10_000


def bump_catalog(db: sqlite3.Connection, object_ids: Iterable[int] | None = None) -> None:
    """Mark the catalog changed (call inside the DDL's transaction).

    ``object_ids``: the objects (tables, change tables) whose rows in ``_emu_objects``,
    ``_emu_columns``, ``_emu_key_columns`` or whose capture instance changed, so connections
    reread only those (see :func:`.catalog.refresh`); an empty list: only database settings or
    schemas changed; None: anything may have changed (connections reread the whole catalog).
    """
    token = new_token()
    db.execute("UPDATE _emu_state SET catalog_token = ?", (token,))
    rows: list[tuple[int, int | None]]
    if object_ids is None:
        rows = [(token, None)]
    else:
        rows = [(token, oid) for oid in sorted(set(object_ids))] or [(token, 0)]
    db.executemany("INSERT INTO _emu_catalog_changes (token, object_id) VALUES (?, ?)", rows)
    db.execute(
        "DELETE FROM _emu_catalog_changes WHERE seq <= "
        "(SELECT MAX(seq) FROM _emu_catalog_changes) - ?",
        (CATALOG_CHANGES_KEPT,),
    )


def next_object_id(db: sqlite3.Connection) -> int:
    (value,) = db.execute("SELECT next_object_id FROM _emu_state").fetchone()
    db.execute("UPDATE _emu_state SET next_object_id = next_object_id + 1")
    return int(value)


def create_cdc_tables(db: sqlite3.Connection) -> None:
    """The cdc schema's metadata tables, created by ``sys.sp_cdc_enable_db``."""
    for obj in CDC_OBJECT_NAMES:
        db.execute(create_table_sql(obj.physical, obj.columns))
    db.execute(
        'CREATE INDEX "cdc.lsn_time_mapping.start_lsn" ON "cdc.lsn_time_mapping" (start_lsn)'
    )
    db.execute(
        'CREATE INDEX "cdc.lsn_time_mapping.tran_end_time" ON "cdc.lsn_time_mapping" '
        "(tran_end_time)"
    )


def drop_cdc_tables(db: sqlite3.Connection) -> None:
    for obj in CDC_OBJECT_NAMES:
        db.execute(f"DROP TABLE IF EXISTS {quote(obj.physical)}")
