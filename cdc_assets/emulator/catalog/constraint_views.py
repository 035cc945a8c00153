"""The ``sys.*`` views of keys, indexes, defaults and services, as SQL Server documents them.

What SQLAlchemy's inspector, JDBC tools and CDC consumers read: ``sys.indexes`` and
``sys.index_columns`` (a table's primary key is its clustered index, index_id 1, and so is a
change table's ``<capture_instance>_CT_clustered_idx``; a table without one is a heap,
index_id 0; UNIQUE constraints and ``CREATE [UNIQUE] INDEX`` are nonclustered indexes from
index_id 2), ``sys.key_constraints`` (PK and UQ), ``sys.default_constraints`` (the definition
in SQL Server's text form, ``((0))``, ``('x')``, ``(getdate())``), ``sys.identity_columns``,
``sys.computed_columns`` (empty: no computed columns), ``sys.foreign_keys`` /
``sys.foreign_key_columns`` (empty: the emulator refuses FOREIGN KEY),
``sys.extended_properties`` (empty) and ``sys.dm_server_services`` (the database engine, and the
SQL Server Agent, Running while the CDC capture job runs).

The rows come from the bookkeeping tables ``_emu_constraints`` (one row per PRIMARY KEY, UNIQUE
and DEFAULT constraint, with its object id), ``_emu_indexes`` and ``_emu_index_columns`` (the
indexes other than a primary key), next to ``_emu_objects``/``_emu_columns``/``_emu_key_columns``.

``sql_variant`` columns (``sys.identity_columns.seed_value``..., ``sys.extended_properties.value``)
are typed as the values they hold (``bigint``, ``nvarchar(4000)``): the emulator has no
``sql_variant``.

:func:`table_indexes` and :func:`table_constraints` read one table's rows of these views back;
``sp_help`` and ``sp_helpindex`` (:mod:`.help_procedures`) answer from them, so the procedures
and the views name every index and constraint alike (as SQL Server's procedures read its views).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ..values import types as T
from ..values.types import SqlType

S = T.SYSNAME
Columns = tuple[tuple[str, SqlType], ...]

_CHAR2 = SqlType("char", length=2)
_DESC = T.nvarchar(60)
_NVARCHAR_MAX = SqlType("nvarchar", length=-1)

# sys.objects' columns, which every view of an object kind starts with
OBJECT_COLUMNS: Columns = (
    ("name", S),
    ("object_id", T.INT),
    ("principal_id", T.INT),
    ("schema_id", T.INT),
    ("parent_object_id", T.INT),
    ("type", _CHAR2),
    ("type_desc", _DESC),
    ("create_date", T.DATETIME),
    ("modify_date", T.DATETIME),
    ("is_ms_shipped", T.BIT),
    ("is_published", T.BIT),
    ("is_schema_published", T.BIT),
)

# sys.columns' columns (SQL Server 2016's first 27; later versions add more at the end)
COLUMN_COLUMNS: Columns = (
    ("object_id", T.INT),
    ("name", S),
    ("column_id", T.INT),
    ("system_type_id", T.TINYINT),
    ("user_type_id", T.INT),
    ("max_length", T.SMALLINT),
    ("precision", T.TINYINT),
    ("scale", T.TINYINT),
    ("collation_name", S),
    ("is_nullable", T.BIT),
    ("is_ansi_padded", T.BIT),
    ("is_rowguidcol", T.BIT),
    ("is_identity", T.BIT),
    ("is_computed", T.BIT),
    ("is_filestream", T.BIT),
    ("is_replicated", T.BIT),
    ("is_non_sql_subscribed", T.BIT),
    ("is_merge_published", T.BIT),
    ("is_dts_replicated", T.BIT),
    ("is_xml_document", T.BIT),
    ("xml_collection_id", T.INT),
    ("default_object_id", T.INT),
    ("rule_object_id", T.INT),
    ("is_sparse", T.BIT),
    ("is_column_set", T.BIT),
    ("generated_always_type", T.TINYINT),
    ("generated_always_type_desc", _DESC),
)

OBJECTS: tuple[tuple[str, Columns], ...] = (
    ("objects", OBJECT_COLUMNS),
    ("columns", COLUMN_COLUMNS),
    (
        "indexes",
        (
            ("object_id", T.INT),
            ("name", S),
            ("index_id", T.INT),
            ("type", T.TINYINT),
            ("type_desc", _DESC),
            ("is_unique", T.BIT),
            ("data_space_id", T.INT),
            ("ignore_dup_key", T.BIT),
            ("is_primary_key", T.BIT),
            ("is_unique_constraint", T.BIT),
            ("fill_factor", T.TINYINT),
            ("is_padded", T.BIT),
            ("is_disabled", T.BIT),
            ("is_hypothetical", T.BIT),
            ("is_ignored_in_optimization", T.BIT),
            ("allow_row_locks", T.BIT),
            ("allow_page_locks", T.BIT),
            ("has_filter", T.BIT),
            ("filter_definition", _NVARCHAR_MAX),
            ("compression_delay", T.INT),
            ("suppress_dup_key_messages", T.BIT),
            ("auto_created", T.BIT),
            ("optimize_for_sequential_key", T.BIT),
        ),
    ),
    (
        "index_columns",
        (
            ("object_id", T.INT),
            ("index_id", T.INT),
            ("index_column_id", T.INT),
            ("column_id", T.INT),
            ("key_ordinal", T.TINYINT),
            ("partition_ordinal", T.TINYINT),
            ("is_descending_key", T.BIT),
            ("is_included_column", T.BIT),
            ("column_store_order_ordinal", T.TINYINT),
        ),
    ),
    (
        "key_constraints",
        (
            *OBJECT_COLUMNS,
            ("unique_index_id", T.INT),
            ("is_system_named", T.BIT),
            ("is_enforced", T.BIT),
        ),
    ),
    (
        "default_constraints",
        (
            *OBJECT_COLUMNS,
            ("parent_column_id", T.INT),
            ("definition", _NVARCHAR_MAX),
            ("is_system_named", T.BIT),
        ),
    ),
    (
        "foreign_keys",
        (
            *OBJECT_COLUMNS,
            ("referenced_object_id", T.INT),
            ("key_index_id", T.INT),
            ("is_disabled", T.BIT),
            ("is_not_for_replication", T.BIT),
            ("is_not_trusted", T.BIT),
            ("delete_referential_action", T.TINYINT),
            ("delete_referential_action_desc", _DESC),
            ("update_referential_action", T.TINYINT),
            ("update_referential_action_desc", _DESC),
            ("is_system_named", T.BIT),
        ),
    ),
    (
        "foreign_key_columns",
        (
            ("constraint_object_id", T.INT),
            ("constraint_column_id", T.INT),
            ("parent_object_id", T.INT),
            ("parent_column_id", T.INT),
            ("referenced_object_id", T.INT),
            ("referenced_column_id", T.INT),
        ),
    ),
    (
        "identity_columns",
        (
            *COLUMN_COLUMNS,
            ("seed_value", T.BIGINT),
            ("increment_value", T.BIGINT),
            ("last_value", T.BIGINT),
            ("is_not_for_replication", T.BIT),
        ),
    ),
    (
        "computed_columns",
        (
            *COLUMN_COLUMNS,
            ("definition", _NVARCHAR_MAX),
            ("uses_database_collation", T.BIT),
            ("is_persisted", T.BIT),
        ),
    ),
    (
        "extended_properties",
        (
            ("class", T.TINYINT),
            ("class_desc", _DESC),
            ("major_id", T.INT),
            ("minor_id", T.INT),
            ("name", S),
            ("value", T.nvarchar(4000)),
        ),
    ),
    (
        "dm_server_services",
        (
            ("servicename", T.nvarchar(256)),
            ("startup_type", T.INT),
            ("startup_type_desc", T.nvarchar(256)),
            ("status", T.INT),
            ("status_desc", T.nvarchar(256)),
            ("process_id", T.INT),
            ("last_startup_time", SqlType("datetimeoffset", scale=7)),
            ("service_account", T.nvarchar(256)),
            ("filename", T.nvarchar(256)),
            ("is_clustered", T.nvarchar(1)),
            ("cluster_nodename", T.nvarchar(256)),
            ("instant_file_initialization_enabled", T.nvarchar(1)),
        ),
    ),
)

_CONSTRAINT_TYPE_DESC = """CASE k.type WHEN 'PK' THEN 'PRIMARY_KEY_CONSTRAINT'
               WHEN 'UQ' THEN 'UNIQUE_CONSTRAINT' ELSE 'DEFAULT_CONSTRAINT' END"""

# the sys.objects columns of a constraint ``k`` (an ``_emu_constraints`` row) of table ``o``
_CONSTRAINT_OBJECT = f"""k.name, k.object_id, NULL AS principal_id, o.schema_id,
               k.parent_object_id, CASE k.type WHEN 'D' THEN 'D ' ELSE k.type END AS type,
               {_CONSTRAINT_TYPE_DESC} AS type_desc, k.create_date,
               k.create_date AS modify_date, 0 AS is_ms_shipped, 0 AS is_published,
               0 AS is_schema_published"""

_COLUMN_BODY = """c.object_id, c.name, c.column_id, t.system_type_id, t.user_type_id,
               c.max_length, c.precision, c.scale,
               CASE WHEN c.type_name IN ('char', 'varchar', 'nchar', 'nvarchar', 'text', 'ntext')
                    THEN 'SQL_Latin1_General_CP1_CI_AS' END AS collation_name,
               c.is_nullable, 1 AS is_ansi_padded, 0 AS is_rowguidcol, c.is_identity,
               0 AS is_computed, 0 AS is_filestream, 0 AS is_replicated,
               0 AS is_non_sql_subscribed, 0 AS is_merge_published, 0 AS is_dts_replicated,
               0 AS is_xml_document, 0 AS xml_collection_id,
               COALESCE((SELECT d.object_id FROM _emu_constraints AS d
                         WHERE d.parent_object_id = c.object_id
                           AND d.parent_column_id = c.column_id AND d.type = 'D'), 0)
                   AS default_object_id,
               0 AS rule_object_id, 0 AS is_sparse, 0 AS is_column_set,
               0 AS generated_always_type, 'NOT_APPLICABLE' AS generated_always_type_desc"""

_COLUMN_FROM = "FROM _emu_columns AS c JOIN _emu_types AS t ON t.name = c.type_name"

_INDEX_DEFAULTS = """1 AS data_space_id, 0 AS ignore_dup_key,
               {is_primary_key} AS is_primary_key, {is_unique_constraint} AS is_unique_constraint,
               0 AS fill_factor, 0 AS is_padded, 0 AS is_disabled, 0 AS is_hypothetical,
               0 AS is_ignored_in_optimization, 1 AS allow_row_locks, 1 AS allow_page_locks,
               0 AS has_filter, NULL AS filter_definition, NULL AS compression_delay,
               0 AS suppress_dup_key_messages, 0 AS auto_created,
               0 AS optimize_for_sequential_key"""

VIEWS: dict[str, str] = {
    "sys.objects": f"""
        SELECT name, object_id, NULL AS principal_id, schema_id, 0 AS parent_object_id,
               'U ' AS type, 'USER_TABLE' AS type_desc, create_date, modify_date,
               is_ms_shipped, 0 AS is_published, 0 AS is_schema_published
        FROM _emu_objects
        UNION ALL
        SELECT {_CONSTRAINT_OBJECT}
        FROM _emu_constraints AS k JOIN _emu_objects AS o ON o.object_id = k.parent_object_id""",
    "sys.columns": f"SELECT {_COLUMN_BODY} {_COLUMN_FROM}",
    # the clustered primary key (index_id 1) or the heap (0) of every table, then the recorded
    # indexes: a change table's clustered index (1), the nonclustered ones (2 and up)
    "sys.indexes": f"""
        SELECT o.object_id, o.pk_name AS name,
               CASE WHEN o.pk_name IS NULL THEN 0 ELSE 1 END AS index_id,
               CASE WHEN o.pk_name IS NULL THEN 0 ELSE 1 END AS type,
               CASE WHEN o.pk_name IS NULL THEN 'HEAP' ELSE 'CLUSTERED' END AS type_desc,
               o.pk_name IS NOT NULL AS is_unique,
               {
        _INDEX_DEFAULTS.format(is_primary_key="o.pk_name IS NOT NULL", is_unique_constraint="0")
    }
        FROM _emu_objects AS o WHERE o.type = 'U' AND NOT EXISTS (
            SELECT 1 FROM _emu_indexes AS c WHERE c.object_id = o.object_id AND c.index_id = 1)
        UNION ALL
        SELECT i.object_id, i.name, i.index_id, CASE WHEN i.index_id = 1 THEN 1 ELSE 2 END AS type,
               CASE WHEN i.index_id = 1 THEN 'CLUSTERED' ELSE 'NONCLUSTERED' END AS type_desc,
               i.is_unique,
               {
        _INDEX_DEFAULTS.format(
            is_primary_key="0", is_unique_constraint="i.constraint_id IS NOT NULL"
        )
    }
        FROM _emu_indexes AS i""",
    "sys.index_columns": """
        SELECT k.object_id, 1 AS index_id, k.key_ordinal AS index_column_id, k.column_id,
               k.key_ordinal, 0 AS partition_ordinal, 0 AS is_descending_key,
               0 AS is_included_column, 0 AS column_store_order_ordinal
        FROM _emu_key_columns AS k JOIN _emu_objects AS o ON o.object_id = k.object_id
        WHERE o.pk_name IS NOT NULL
        UNION ALL
        SELECT object_id, index_id, key_ordinal AS index_column_id, column_id, key_ordinal,
               0 AS partition_ordinal, is_descending_key, 0 AS is_included_column,
               0 AS column_store_order_ordinal
        FROM _emu_index_columns""",
    "sys.key_constraints": f"""
        SELECT {_CONSTRAINT_OBJECT},
               CASE WHEN k.type = 'PK' THEN 1
                    ELSE (SELECT i.index_id FROM _emu_indexes AS i
                          WHERE i.object_id = k.parent_object_id
                            AND i.constraint_id = k.object_id) END AS unique_index_id,
               k.is_system_named, 1 AS is_enforced
        FROM _emu_constraints AS k JOIN _emu_objects AS o ON o.object_id = k.parent_object_id
        WHERE k.type IN ('PK', 'UQ')""",
    "sys.default_constraints": f"""
        SELECT {_CONSTRAINT_OBJECT}, k.parent_column_id, k.definition, k.is_system_named
        FROM _emu_constraints AS k JOIN _emu_objects AS o ON o.object_id = k.parent_object_id
        WHERE k.type = 'D'""",
    "sys.foreign_keys": """
        SELECT NULL AS name, NULL AS object_id, NULL AS principal_id, NULL AS schema_id,
               NULL AS parent_object_id, NULL AS type, NULL AS type_desc, NULL AS create_date,
               NULL AS modify_date, NULL AS is_ms_shipped, NULL AS is_published,
               NULL AS is_schema_published, NULL AS referenced_object_id, NULL AS key_index_id,
               NULL AS is_disabled, NULL AS is_not_for_replication, NULL AS is_not_trusted,
               NULL AS delete_referential_action, NULL AS delete_referential_action_desc,
               NULL AS update_referential_action, NULL AS update_referential_action_desc,
               NULL AS is_system_named
        WHERE 0""",
    "sys.foreign_key_columns": """
        SELECT NULL AS constraint_object_id, NULL AS constraint_column_id,
               NULL AS parent_object_id, NULL AS parent_column_id, NULL AS referenced_object_id,
               NULL AS referenced_column_id
        WHERE 0""",
    # IDENTITY(1,1) only; last_value from SQLite's AUTOINCREMENT counter (NULL before the first
    # row, as SQL Server)
    "sys.identity_columns": f"""
        SELECT {_COLUMN_BODY}, 1 AS seed_value, 1 AS increment_value,
               (SELECT q.seq FROM sqlite_sequence AS q WHERE q.name = o.physical) AS last_value,
               0 AS is_not_for_replication
        {_COLUMN_FROM} JOIN _emu_objects AS o ON o.object_id = c.object_id
        WHERE c.is_identity""",
    "sys.computed_columns": f"""
        SELECT {_COLUMN_BODY}, NULL AS definition, 1 AS uses_database_collation,
               0 AS is_persisted
        {_COLUMN_FROM} WHERE 0""",
    "sys.extended_properties": """
        SELECT NULL AS class, NULL AS class_desc, NULL AS major_id, NULL AS minor_id,
               NULL AS name, NULL AS value
        WHERE 0""",
    # The database engine, and the SQL Server Agent: Running while the CDC capture job runs
    # (sys.sp_cdc_start_job / sp_cdc_stop_job), since the job's start (shown in UTC)
    "sys.dm_server_services": """
        SELECT 'SQL Server (MSSQLSERVER)' AS servicename, 2 AS startup_type,
               'Automatic' AS startup_type_desc, 4 AS status, 'Running' AS status_desc,
               NULL AS process_id, NULL AS last_startup_time,
               'NT Service\\MSSQLSERVER' AS service_account,
               '"C:\\Program Files\\Microsoft SQL Server\\MSSQL16.MSSQLSERVER\\MSSQL\\Binn\\'
                   || 'sqlservr.exe" -sMSSQLSERVER' AS filename,
               'N' AS is_clustered, NULL AS cluster_nodename,
               'N' AS instant_file_initialization_enabled
        UNION ALL
        SELECT 'SQL Server Agent (MSSQLSERVER)', 2, 'Automatic',
               CASE WHEN j.running = 1 THEN 4 ELSE 1 END,
               CASE WHEN j.running = 1 THEN 'Running' ELSE 'Stopped' END,
               NULL,
               CASE WHEN j.running = 1 THEN
                   strftime('%Y-%m-%d %H:%M:%S', substr(j.start_time, 1, 19), 'utc')
                   || substr(j.start_time, 20) || ' +00:00' END,
               'NT Service\\SQLSERVERAGENT',
               '"C:\\Program Files\\Microsoft SQL Server\\MSSQL16.MSSQLSERVER\\MSSQL\\Binn\\'
                   || 'SQLAGENT.EXE" -i MSSQLSERVER',
               'N', NULL, 'N'
        FROM (SELECT 1) LEFT JOIN _emu_jobs AS j ON j.job_type = 'capture'""",
}


# -- one table's rows of these views, for the help procedures -------------------------------------


@dataclass(frozen=True)
class IndexRow:
    """A ``sys.indexes`` row of a table (not its heap) and its keys from ``sys.index_columns``."""

    index_id: int
    name: str
    is_unique: bool
    is_primary_key: bool
    is_unique_constraint: bool
    keys: tuple[tuple[str, bool], ...]  # (column name, descending), in key order

    @property
    def clustered(self) -> bool:
        return self.index_id == 1


@dataclass(frozen=True)
class ConstraintRow:
    """A ``sys.key_constraints`` or ``sys.default_constraints`` row of a table."""

    name: str
    type: str  # "PK", "UQ" or "D"
    unique_index_id: int | None  # PK / UQ: its index in sys.indexes
    column: str | None  # D: the column it belongs to
    definition: str | None  # D: ((0)), (N'x'), (getdate())


def _column_names(db: sqlite3.Connection, object_id: int) -> dict[int, str]:
    return dict(
        db.execute("SELECT column_id, name FROM _emu_columns WHERE object_id = ?", (object_id,))
    )


def table_indexes(db: sqlite3.Connection, object_id: int) -> list[IndexRow]:
    """The indexes ``sys.indexes`` lists for the table ``object_id``, by index_id."""
    names = _column_names(db, object_id)
    keys: dict[int, list[tuple[str, bool]]] = {}
    for index_id, column_id, descending in db.execute(
        'SELECT index_id, column_id, is_descending_key FROM "sys.index_columns" '
        "WHERE object_id = ? ORDER BY index_id, key_ordinal",
        (object_id,),
    ):
        keys.setdefault(int(index_id), []).append((names[column_id], bool(descending)))
    return [
        IndexRow(
            int(index_id),
            str(name),
            bool(unique),
            bool(primary),
            bool(constraint),
            tuple(keys.get(int(index_id), ())),
        )
        for index_id, name, unique, primary, constraint in db.execute(
            "SELECT index_id, name, is_unique, is_primary_key, is_unique_constraint "
            'FROM "sys.indexes" WHERE object_id = ? AND index_id > 0 ORDER BY index_id',
            (object_id,),
        )
    ]


def table_constraints(db: sqlite3.Connection, object_id: int) -> list[ConstraintRow]:
    """The PRIMARY KEY and UNIQUE constraints ``sys.key_constraints`` lists for the table
    ``object_id``, then the DEFAULT constraints of ``sys.default_constraints``."""
    names = _column_names(db, object_id)
    keys = [
        ConstraintRow(str(name), str(kind), int(index_id), None, None)
        for name, kind, index_id in db.execute(
            'SELECT name, type, unique_index_id FROM "sys.key_constraints" '
            "WHERE parent_object_id = ? ORDER BY object_id",
            (object_id,),
        )
    ]
    defaults = [
        ConstraintRow(str(name), "D", None, names.get(column_id), definition)
        for name, column_id, definition in db.execute(
            'SELECT name, parent_column_id, definition FROM "sys.default_constraints" '
            "WHERE parent_object_id = ? ORDER BY object_id",
            (object_id,),
        )
    ]
    return keys + defaults
