"""The SQLite file layout: internal bookkeeping tables, system tables and ``sys.*`` views.

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
  clustered index, index_id 1). Behind the views of :mod:`.constraint_views`.
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import constraint_views, session_views
from . import types as T
from .types import SqlType

DATABASE_ID = 5
FIRST_LSN = (0x2A << 48) | (0x100 << 16) | 1
FIRST_OBJECT_ID = 1_013_578_649
LSN_STEP = 16

SCHEMA_IDS = {"dbo": 1, "guest": 2, "INFORMATION_SCHEMA": 3, "sys": 4}
CDC_SCHEMA_ID = 5


@dataclass(frozen=True)
class SystemObject:
    """A system table or view: its SQL Server name, SQLite name and typed columns."""

    schema: str
    name: str
    columns: tuple[tuple[str, SqlType], ...]
    requires_cdc: bool = False
    catalog: str | None = None

    @property
    def physical(self) -> str:
        prefix = f"{self.catalog}." if self.catalog else ""
        return f"{prefix}{self.schema}.{self.name}"


def _cols(*pairs: tuple[str, SqlType]) -> tuple[tuple[str, SqlType], ...]:
    return tuple(pairs)


S = T.SYSNAME
SYSTEM_OBJECTS: tuple[SystemObject, ...] = (
    SystemObject(
        "cdc",
        "change_tables",
        _cols(
            ("object_id", T.INT),
            ("version", T.INT),
            ("source_object_id", T.INT),
            ("capture_instance", S),
            ("start_lsn", T.LSN),
            ("end_lsn", T.LSN),
            ("supports_net_changes", T.BIT),
            ("has_drop_pending", T.BIT),
            ("role_name", S),
            ("index_name", S),
            ("filegroup_name", S),
            ("create_date", T.DATETIME),
            ("partition_switch", T.BIT),
        ),
        requires_cdc=True,
    ),
    SystemObject(
        "cdc",
        "captured_columns",
        _cols(
            ("object_id", T.INT),
            ("column_name", S),
            ("column_id", T.INT),
            ("column_type", S),
            ("column_ordinal", T.INT),
            ("is_computed", T.BIT),
            ("masking_function", T.nvarchar(4000)),
        ),
        requires_cdc=True,
    ),
    SystemObject(
        "cdc",
        "index_columns",
        _cols(
            ("object_id", T.INT),
            ("column_name", S),
            ("index_ordinal", T.TINYINT),
            ("column_id", T.INT),
        ),
        requires_cdc=True,
    ),
    SystemObject(
        "cdc",
        "lsn_time_mapping",
        _cols(
            ("start_lsn", T.LSN),
            ("tran_begin_time", T.DATETIME),
            ("tran_end_time", T.DATETIME),
            ("tran_id", SqlType("varbinary", length=10)),
            ("tran_begin_lsn", T.LSN),
        ),
        requires_cdc=True,
    ),
    SystemObject(
        "cdc",
        "ddl_history",
        _cols(
            ("source_object_id", T.INT),
            ("object_id", T.INT),
            ("required_column_update", T.BIT),
            ("ddl_command", SqlType("nvarchar", length=-1)),
            ("ddl_lsn", T.LSN),
            ("ddl_time", T.DATETIME),
        ),
        requires_cdc=True,
    ),
    SystemObject(
        "dbo",
        "cdc_jobs",
        _cols(
            ("database_id", T.INT),
            ("job_type", T.nvarchar(20)),
            ("job_id", SqlType("uniqueidentifier")),
            ("maxtrans", T.INT),
            ("maxscans", T.INT),
            ("continuous", T.BIT),
            ("pollinginterval", T.BIGINT),
            ("retention", T.BIGINT),
            ("threshold", T.BIGINT),
        ),
        catalog="msdb",
    ),
    SystemObject(
        "dbo",
        "sysjobactivity",
        _cols(
            ("session_id", T.INT),
            ("job_id", SqlType("uniqueidentifier")),
            ("start_execution_date", T.DATETIME),
            ("stop_execution_date", T.DATETIME),
        ),
        catalog="msdb",
    ),
    SystemObject(
        "sys",
        "dm_cdc_log_scan_sessions",
        _cols(
            ("session_id", T.INT),
            ("start_time", T.DATETIME),
            ("end_time", T.DATETIME),
            ("duration", T.INT),
            ("scan_phase", T.nvarchar(200)),
            ("error_count", T.INT),
            ("start_lsn", T.nvarchar(23)),
            ("current_lsn", T.nvarchar(23)),
            ("end_lsn", T.nvarchar(23)),
            ("tran_count", T.BIGINT),
            ("last_commit_lsn", T.nvarchar(23)),
            ("last_commit_time", T.DATETIME),
            ("log_record_count", T.BIGINT),
            ("schema_change_count", T.INT),
            ("command_count", T.BIGINT),
            ("first_begin_cdc_lsn", T.nvarchar(23)),
            ("last_commit_cdc_lsn", T.nvarchar(23)),
            ("last_commit_cdc_time", T.DATETIME),
            ("latency", T.INT),
            ("empty_scan_count", T.INT),
            ("failed_sessions_count", T.INT),
        ),
    ),
    # -- views -------------------------------------------------------------------------------
    SystemObject(
        "sys",
        "databases",
        _cols(
            ("name", S),
            ("database_id", T.INT),
            ("create_date", T.DATETIME),
            ("compatibility_level", T.TINYINT),
            ("collation_name", S),
            ("state", T.TINYINT),
            ("state_desc", T.nvarchar(60)),
            ("is_read_only", T.BIT),
            ("snapshot_isolation_state", T.TINYINT),
            ("snapshot_isolation_state_desc", T.nvarchar(60)),
            ("is_read_committed_snapshot_on", T.BIT),
            ("recovery_model", T.TINYINT),
            ("recovery_model_desc", T.nvarchar(60)),
            ("is_cdc_enabled", T.BIT),
        ),
    ),
    SystemObject(
        "sys",
        "schemas",
        _cols(("name", S), ("schema_id", T.INT), ("principal_id", T.INT)),
    ),
    SystemObject(
        "sys",
        "tables",
        _cols(
            ("name", S),
            ("object_id", T.INT),
            ("principal_id", T.INT),
            ("schema_id", T.INT),
            ("parent_object_id", T.INT),
            ("type", SqlType("char", length=2)),
            ("type_desc", T.nvarchar(60)),
            ("create_date", T.DATETIME),
            ("modify_date", T.DATETIME),
            ("is_ms_shipped", T.BIT),
            ("is_tracked_by_cdc", T.BIT),
            ("temporal_type", T.TINYINT),
        ),
    ),
    SystemObject(
        "sys",
        "types",
        _cols(
            ("name", S),
            ("system_type_id", T.TINYINT),
            ("user_type_id", T.INT),
            ("schema_id", T.INT),
            ("principal_id", T.INT),
            ("max_length", T.SMALLINT),
            ("precision", T.TINYINT),
            ("scale", T.TINYINT),
            ("collation_name", S),
            ("is_nullable", T.BIT),
            ("is_user_defined", T.BIT),
            ("is_assembly_type", T.BIT),
            ("default_object_id", T.INT),
            ("rule_object_id", T.INT),
            ("is_table_type", T.BIT),
        ),
    ),
    # One row per table (heap: index_id 0, clustered index: 1); ``rows`` is the table's
    # committed rows, counted when asked (SQL Server keeps the number with every change; its docs
    # call it approximate: it may include rows of transactions in flight).
    SystemObject(
        "sys",
        "partitions",
        _cols(
            ("partition_id", T.BIGINT),
            ("object_id", T.INT),
            ("index_id", T.INT),
            ("partition_number", T.INT),
            ("hobt_id", T.BIGINT),
            ("rows", T.BIGINT),
            ("filestream_filegroup_id", T.SMALLINT),
            ("data_compression", T.TINYINT),
            ("data_compression_desc", T.SqlType("nvarchar", length=60)),
        ),
    ),
    SystemObject(
        "sys",
        "dm_tran_current_transaction",
        _cols(
            ("transaction_id", T.BIGINT),
            ("transaction_sequence_num", T.BIGINT),
            ("transaction_is_snapshot", T.BIT),
            ("first_snapshot_sequence_num", T.BIGINT),
            ("last_transaction_sequence_num", T.BIGINT),
            ("first_useful_sequence_num", T.BIGINT),
        ),
    ),
    SystemObject(
        "sys",
        "dm_tran_database_transactions",
        _cols(
            ("transaction_id", T.BIGINT),
            ("database_id", T.INT),
            ("database_transaction_begin_time", T.DATETIME),
            ("database_transaction_type", T.INT),
            ("database_transaction_state", T.INT),
            ("database_transaction_log_record_count", T.BIGINT),
            ("database_transaction_begin_lsn", T.NUMERIC25),
            ("database_transaction_last_lsn", T.NUMERIC25),
            ("database_transaction_most_recent_savepoint_lsn", T.NUMERIC25),
            ("database_transaction_commit_lsn", T.NUMERIC25),
        ),
    ),
    *(SystemObject("sys", name, columns) for name, columns in constraint_views.OBJECTS),
    *(SystemObject("sys", name, columns) for name, columns in session_views.OBJECTS),
    *(
        SystemObject("INFORMATION_SCHEMA", name, columns)
        for name, columns in (
            (
                "TABLES",
                _cols(
                    ("TABLE_CATALOG", S),
                    ("TABLE_SCHEMA", S),
                    ("TABLE_NAME", S),
                    ("TABLE_TYPE", SqlType("varchar", length=10)),
                ),
            ),
            (
                "COLUMNS",
                _cols(
                    ("TABLE_CATALOG", S),
                    ("TABLE_SCHEMA", S),
                    ("TABLE_NAME", S),
                    ("COLUMN_NAME", S),
                    ("ORDINAL_POSITION", T.INT),
                    ("COLUMN_DEFAULT", T.nvarchar(4000)),
                    ("IS_NULLABLE", SqlType("varchar", length=3)),
                    ("DATA_TYPE", S),
                    ("CHARACTER_MAXIMUM_LENGTH", T.INT),
                    ("CHARACTER_OCTET_LENGTH", T.INT),
                    ("NUMERIC_PRECISION", T.TINYINT),
                    ("NUMERIC_PRECISION_RADIX", T.SMALLINT),
                    ("NUMERIC_SCALE", T.INT),
                    ("DATETIME_PRECISION", T.SMALLINT),
                    ("CHARACTER_SET_CATALOG", S),
                    ("CHARACTER_SET_SCHEMA", S),
                    ("CHARACTER_SET_NAME", S),
                    ("COLLATION_CATALOG", S),
                    ("COLLATION_SCHEMA", S),
                    ("COLLATION_NAME", S),
                    ("DOMAIN_CATALOG", S),
                    ("DOMAIN_SCHEMA", S),
                    ("DOMAIN_NAME", S),
                ),
            ),
            (
                "SCHEMATA",
                _cols(
                    ("CATALOG_NAME", S),
                    ("SCHEMA_NAME", S),
                    ("SCHEMA_OWNER", S),
                    ("DEFAULT_CHARACTER_SET_CATALOG", S),
                    ("DEFAULT_CHARACTER_SET_SCHEMA", S),
                    ("DEFAULT_CHARACTER_SET_NAME", S),
                ),
            ),
            (
                "TABLE_CONSTRAINTS",
                _cols(
                    ("CONSTRAINT_CATALOG", S),
                    ("CONSTRAINT_SCHEMA", S),
                    ("CONSTRAINT_NAME", S),
                    ("TABLE_CATALOG", S),
                    ("TABLE_SCHEMA", S),
                    ("TABLE_NAME", S),
                    ("CONSTRAINT_TYPE", SqlType("varchar", length=11)),
                    ("IS_DEFERRABLE", SqlType("varchar", length=2)),
                    ("INITIALLY_DEFERRED", SqlType("varchar", length=2)),
                ),
            ),
            (
                "KEY_COLUMN_USAGE",
                _cols(
                    ("CONSTRAINT_CATALOG", S),
                    ("CONSTRAINT_SCHEMA", S),
                    ("CONSTRAINT_NAME", S),
                    ("TABLE_CATALOG", S),
                    ("TABLE_SCHEMA", S),
                    ("TABLE_NAME", S),
                    ("COLUMN_NAME", S),
                    ("ORDINAL_POSITION", T.INT),
                ),
            ),
            (
                "VIEWS",
                _cols(
                    ("TABLE_CATALOG", S),
                    ("TABLE_SCHEMA", S),
                    ("TABLE_NAME", S),
                    ("VIEW_DEFINITION", T.nvarchar(4000)),
                    ("CHECK_OPTION", SqlType("varchar", length=7)),
                    ("IS_UPDATABLE", SqlType("varchar", length=2)),
                ),
            ),
            (
                "REFERENTIAL_CONSTRAINTS",
                _cols(
                    ("CONSTRAINT_CATALOG", S),
                    ("CONSTRAINT_SCHEMA", S),
                    ("CONSTRAINT_NAME", S),
                    ("UNIQUE_CONSTRAINT_CATALOG", S),
                    ("UNIQUE_CONSTRAINT_SCHEMA", S),
                    ("UNIQUE_CONSTRAINT_NAME", S),
                    ("MATCH_OPTION", SqlType("varchar", length=7)),
                    ("UPDATE_RULE", SqlType("varchar", length=11)),
                    ("DELETE_RULE", SqlType("varchar", length=11)),
                ),
            ),
            (
                "ROUTINES",
                _cols(
                    ("SPECIFIC_CATALOG", S),
                    ("SPECIFIC_SCHEMA", S),
                    ("SPECIFIC_NAME", S),
                    ("ROUTINE_CATALOG", S),
                    ("ROUTINE_SCHEMA", S),
                    ("ROUTINE_NAME", S),
                    ("ROUTINE_TYPE", T.nvarchar(20)),
                    ("DATA_TYPE", S),
                    ("ROUTINE_DEFINITION", T.nvarchar(4000)),
                ),
            ),
        )
    ),
)

SYSTEM_BY_NAME: dict[tuple[str | None, str, str], SystemObject] = {
    (o.catalog, o.schema.lower(), o.name.lower()): o for o in SYSTEM_OBJECTS
}

_VIEWS: dict[str, str] = {
    "sys.databases": """
        SELECT _emu_db_name() AS name, 5 AS database_id,
               (SELECT value FROM _emu_meta WHERE key = 'create_date') AS create_date,
               150 AS compatibility_level, 'SQL_Latin1_General_CP1_CI_AS' AS collation_name,
               0 AS state, 'ONLINE' AS state_desc, 0 AS is_read_only,
               (SELECT value FROM _emu_meta WHERE key = 'allow_snapshot')
                   AS snapshot_isolation_state,
               CASE (SELECT value FROM _emu_meta WHERE key = 'allow_snapshot')
                    WHEN 1 THEN 'ON' ELSE 'OFF' END AS snapshot_isolation_state_desc,
               0 AS is_read_committed_snapshot_on, 1 AS recovery_model,
               'FULL' AS recovery_model_desc,
               (SELECT value FROM _emu_meta WHERE key = 'cdc_enabled') AS is_cdc_enabled""",
    "sys.schemas": "SELECT name, schema_id, 1 AS principal_id FROM _emu_schemas",
    "sys.tables": """
        SELECT name, object_id, NULL AS principal_id, schema_id, 0 AS parent_object_id,
               'U ' AS type, 'USER_TABLE' AS type_desc, create_date, modify_date,
               is_ms_shipped, is_tracked_by_cdc, 0 AS temporal_type
        FROM _emu_objects WHERE type = 'U'""",
    "sys.types": """
        SELECT name, system_type_id, user_type_id, 4 AS schema_id, NULL AS principal_id,
               max_length, precision, scale,
               CASE WHEN name IN ('char', 'varchar', 'nchar', 'nvarchar', 'text', 'ntext',
                                  'sysname')
                    THEN 'SQL_Latin1_General_CP1_CI_AS' END AS collation_name,
               is_nullable, 0 AS is_user_defined, 0 AS is_assembly_type,
               0 AS default_object_id, 0 AS rule_object_id, 0 AS is_table_type
        FROM _emu_types""",
    "sys.partitions": """
        SELECT p.object_id * 256 + p.clustered AS partition_id, p.object_id,
               p.clustered AS index_id, 1 AS partition_number,
               p.object_id * 256 + p.clustered AS hobt_id,
               _emu_table_rows(p.physical) AS rows, 0 AS filestream_filegroup_id,
               0 AS data_compression, 'NONE' AS data_compression_desc
        FROM (SELECT o.object_id, o.physical,
                     o.pk_name IS NOT NULL OR EXISTS (
                         SELECT 1 FROM _emu_indexes AS i
                         WHERE i.object_id = o.object_id AND i.index_id = 1) AS clustered
              FROM _emu_objects AS o WHERE o.type = 'U') AS p""",
    "sys.dm_tran_current_transaction": """
        SELECT _emu_tran_id() AS transaction_id, _emu_tran_id() AS transaction_sequence_num,
               _emu_tran_is_snapshot() AS transaction_is_snapshot,
               _emu_tran_id() AS first_snapshot_sequence_num,
               _emu_tran_id() AS last_transaction_sequence_num,
               _emu_tran_id() AS first_useful_sequence_num""",
    # Agent activity of the CDC jobs: started (stop NULL) or stopped by sp_cdc_start/stop_job.
    "msdb.dbo.sysjobactivity": """
        SELECT j.start_count AS session_id, c.job_id, j.start_time AS start_execution_date,
               CASE WHEN j.running = 1 THEN NULL ELSE j.stop_time END AS stop_execution_date
        FROM _emu_jobs AS j JOIN "msdb.dbo.cdc_jobs" AS c ON c.job_type = j.job_type""",
    "sys.dm_tran_database_transactions": """
        SELECT _emu_tran_id() AS transaction_id, 5 AS database_id,
               _emu_tran_begin_time() AS database_transaction_begin_time,
               _emu_tran_type() AS database_transaction_type,
               CASE WHEN _emu_tran_begin_lsn() IS NULL THEN 1 ELSE 4 END
                   AS database_transaction_state,
               0 AS database_transaction_log_record_count,
               _emu_tran_begin_lsn() AS database_transaction_begin_lsn,
               _emu_tran_begin_lsn() AS database_transaction_last_lsn,
               _emu_tran_savepoint_lsn() AS database_transaction_most_recent_savepoint_lsn,
               NULL AS database_transaction_commit_lsn
        WHERE _emu_tran_id() IS NOT NULL""",
}

# INFORMATION_SCHEMA, as SQL Server defines its views over the catalog (the emulator has no views,
# foreign keys or routines of its own: those three are empty)
_STRING_TYPES = "('char', 'varchar', 'text', 'nchar', 'nvarchar', 'ntext')"
_UNICODE_TYPES = "('nchar', 'nvarchar', 'ntext')"
_EXACT_TYPES = (
    "('tinyint', 'smallint', 'int', 'bigint', 'decimal', 'numeric', 'money', 'smallmoney')"
)
_VIEWS.update(
    {
        "INFORMATION_SCHEMA.TABLES": """
        SELECT _emu_db_name() AS TABLE_CATALOG, s.name AS TABLE_SCHEMA, o.name AS TABLE_NAME,
               'BASE TABLE' AS TABLE_TYPE
        FROM _emu_objects AS o JOIN _emu_schemas AS s ON s.schema_id = o.schema_id
        WHERE o.type = 'U'""",
        "INFORMATION_SCHEMA.COLUMNS": f"""
        SELECT _emu_db_name() AS TABLE_CATALOG, s.name AS TABLE_SCHEMA, o.name AS TABLE_NAME,
               c.name AS COLUMN_NAME, c.column_id AS ORDINAL_POSITION,
               (SELECT d.definition FROM _emu_constraints AS d
                WHERE d.parent_object_id = c.object_id AND d.parent_column_id = c.column_id
                  AND d.type = 'D') AS COLUMN_DEFAULT,
               CASE WHEN c.is_nullable THEN 'YES' ELSE 'NO' END AS IS_NULLABLE,
               c.type_name AS DATA_TYPE,
               CASE WHEN c.type_name = 'text' THEN 2147483647
                    WHEN c.type_name = 'ntext' THEN 1073741823
                    WHEN c.max_length = -1
                         AND c.type_name IN ('varchar', 'nvarchar', 'varbinary') THEN -1
                    WHEN c.type_name IN {_UNICODE_TYPES} THEN c.max_length / 2
                    WHEN c.type_name IN ('char', 'varchar', 'binary', 'varbinary')
                         THEN c.max_length END AS CHARACTER_MAXIMUM_LENGTH,
               CASE WHEN c.type_name = 'text' THEN 2147483647
                    WHEN c.type_name = 'ntext' THEN 2147483646
                    WHEN c.type_name IN {_STRING_TYPES} OR c.type_name IN ('binary', 'varbinary')
                         THEN c.max_length END AS CHARACTER_OCTET_LENGTH,
               CASE WHEN c.type_name IN {_EXACT_TYPES} OR c.type_name IN ('float', 'real')
                    THEN c.precision END AS NUMERIC_PRECISION,
               CASE WHEN c.type_name IN {_EXACT_TYPES} THEN 10
                    WHEN c.type_name IN ('float', 'real') THEN 2 END AS NUMERIC_PRECISION_RADIX,
               CASE WHEN c.type_name IN {_EXACT_TYPES} THEN c.scale END AS NUMERIC_SCALE,
               CASE WHEN c.type_name IN ('date', 'smalldatetime') THEN 0
                    WHEN c.type_name = 'datetime' THEN 3
                    WHEN c.type_name IN ('datetime2', 'time', 'datetimeoffset') THEN c.scale
                    END AS DATETIME_PRECISION,
               NULL AS CHARACTER_SET_CATALOG, NULL AS CHARACTER_SET_SCHEMA,
               CASE WHEN c.type_name IN {_UNICODE_TYPES} THEN 'UNICODE'
                    WHEN c.type_name IN {_STRING_TYPES} THEN 'iso_1' END AS CHARACTER_SET_NAME,
               NULL AS COLLATION_CATALOG, NULL AS COLLATION_SCHEMA,
               CASE WHEN c.type_name IN {_STRING_TYPES} THEN 'SQL_Latin1_General_CP1_CI_AS'
                    END AS COLLATION_NAME,
               NULL AS DOMAIN_CATALOG, NULL AS DOMAIN_SCHEMA, NULL AS DOMAIN_NAME
        FROM _emu_columns AS c JOIN _emu_objects AS o ON o.object_id = c.object_id
        JOIN _emu_schemas AS s ON s.schema_id = o.schema_id
        WHERE o.type = 'U'""",
        "INFORMATION_SCHEMA.SCHEMATA": """
        SELECT _emu_db_name() AS CATALOG_NAME, name AS SCHEMA_NAME,
               CASE WHEN name IN ('INFORMATION_SCHEMA', 'sys', 'guest', 'cdc') THEN name
                    ELSE 'dbo' END AS SCHEMA_OWNER,
               NULL AS DEFAULT_CHARACTER_SET_CATALOG, NULL AS DEFAULT_CHARACTER_SET_SCHEMA,
               'iso_1' AS DEFAULT_CHARACTER_SET_NAME
        FROM _emu_schemas""",
        "INFORMATION_SCHEMA.TABLE_CONSTRAINTS": """
        SELECT _emu_db_name() AS CONSTRAINT_CATALOG, s.name AS CONSTRAINT_SCHEMA,
               o.pk_name AS CONSTRAINT_NAME, _emu_db_name() AS TABLE_CATALOG,
               s.name AS TABLE_SCHEMA, o.name AS TABLE_NAME, 'PRIMARY KEY' AS CONSTRAINT_TYPE,
               'NO' AS IS_DEFERRABLE, 'NO' AS INITIALLY_DEFERRED
        FROM _emu_objects AS o JOIN _emu_schemas AS s ON s.schema_id = o.schema_id
        WHERE o.type = 'U' AND o.pk_name IS NOT NULL""",
        "INFORMATION_SCHEMA.KEY_COLUMN_USAGE": """
        SELECT _emu_db_name() AS CONSTRAINT_CATALOG, s.name AS CONSTRAINT_SCHEMA,
               o.pk_name AS CONSTRAINT_NAME, _emu_db_name() AS TABLE_CATALOG,
               s.name AS TABLE_SCHEMA, o.name AS TABLE_NAME, c.name AS COLUMN_NAME,
               k.key_ordinal AS ORDINAL_POSITION
        FROM _emu_key_columns AS k JOIN _emu_objects AS o ON o.object_id = k.object_id
        JOIN _emu_schemas AS s ON s.schema_id = o.schema_id
        JOIN _emu_columns AS c ON c.object_id = k.object_id AND c.column_id = k.column_id
        WHERE o.type = 'U' AND o.pk_name IS NOT NULL""",
        "INFORMATION_SCHEMA.VIEWS": """
        SELECT NULL AS TABLE_CATALOG, NULL AS TABLE_SCHEMA, NULL AS TABLE_NAME,
               NULL AS VIEW_DEFINITION, NULL AS CHECK_OPTION, NULL AS IS_UPDATABLE WHERE 0""",
        "INFORMATION_SCHEMA.REFERENTIAL_CONSTRAINTS": """
        SELECT NULL AS CONSTRAINT_CATALOG, NULL AS CONSTRAINT_SCHEMA, NULL AS CONSTRAINT_NAME,
               NULL AS UNIQUE_CONSTRAINT_CATALOG, NULL AS UNIQUE_CONSTRAINT_SCHEMA,
               NULL AS UNIQUE_CONSTRAINT_NAME, NULL AS MATCH_OPTION, NULL AS UPDATE_RULE,
               NULL AS DELETE_RULE WHERE 0""",
        "INFORMATION_SCHEMA.ROUTINES": """
        SELECT NULL AS SPECIFIC_CATALOG, NULL AS SPECIFIC_SCHEMA, NULL AS SPECIFIC_NAME,
               NULL AS ROUTINE_CATALOG, NULL AS ROUTINE_SCHEMA, NULL AS ROUTINE_NAME,
               NULL AS ROUTINE_TYPE, NULL AS DATA_TYPE, NULL AS ROUTINE_DEFINITION WHERE 0""",
    }
)

_VIEWS.update(constraint_views.VIEWS)
_VIEWS.update(session_views.VIEWS)
_VIEWS["sys.system_views"] = session_views.system_views_sql(
    [o.name for o in SYSTEM_OBJECTS if o.schema == "sys" and o.catalog is None]
)

_INTERNAL_DDL = """
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
_ADDED_DDL = """
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

# every view of the layout; an older database file gets those it lacks, and those whose
# definition changed since it was made, when opened (:func:`bootstrap`)
LAYOUT_VIEWS = tuple(
    o.physical for o in SYSTEM_OBJECTS if not o.requires_cdc and o.physical in _VIEWS
)

CDC_OBJECT_NAMES = tuple(o for o in SYSTEM_OBJECTS if o.requires_cdc)


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
        if "_emu_catalog_changes" not in stored or _stale_views(stored):
            _add_tables(db)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_emu_state'"
        ).fetchone():
            db.execute("COMMIT")
            return
        for statement in (_INTERNAL_DDL + _ADDED_DDL).strip().split(";"):
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
            if obj.physical in _VIEWS:
                db.execute(_view_sql(obj.physical))
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


def _view_sql(name: str) -> str:
    """The statement that makes the view ``name``, as SQLite keeps it in ``sqlite_master``."""
    return f"CREATE VIEW {quote(name)} AS {_VIEWS[name]}"


def _stale_views(stored: dict[str, str]) -> list[str]:
    """The layout's views missing from ``stored`` (``sqlite_master``'s name -> sql) or made by an
    older definition."""
    return [name for name in LAYOUT_VIEWS if stored.get(name) != _view_sql(name)]


def _add_tables(db: sqlite3.Connection) -> None:
    """Create the tables and views added to the layout since ``db`` was made, make again the
    views whose definition changed, and record what older files did not keep: their keys and
    indexes, their change tables' clustered indexes."""
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _ADDED_DDL.strip().split(";"):
            if statement.strip():
                db.execute(statement)
        stored = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
        for name in _stale_views(stored):
            db.execute(f"DROP VIEW IF EXISTS {quote(name)}")
            db.execute(_view_sql(name))
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


# -- constraint and index rows (sys.key_constraints, sys.indexes: see .constraint_views) ---------


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
