"""The SQL of the layout's views: ``sys.*``, ``INFORMATION_SCHEMA.*`` over the bookkeeping tables.

:mod:`.bootstrap` creates them in a new file and makes again, in an older file, those missing or
whose definition changed since it was made.
"""

from __future__ import annotations

from . import constraint_views, principal_views, session_views
from .storage import quote
from .system_objects import SYSTEM_OBJECTS

VIEWS: dict[str, str] = {
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
VIEWS.update(
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

VIEWS.update(constraint_views.VIEWS)
VIEWS.update(session_views.VIEWS)
VIEWS.update(principal_views.VIEWS)
VIEWS["sys.system_views"] = session_views.system_views_sql(
    [o.name for o in SYSTEM_OBJECTS if o.schema == "sys" and o.catalog is None]
)

# every view of the layout; an older database file gets those it lacks, and those whose
# definition changed since it was made, when opened (:func:`.bootstrap.bootstrap`)
LAYOUT_VIEWS = tuple(
    o.physical for o in SYSTEM_OBJECTS if not o.requires_cdc and o.physical in VIEWS
)


def view_sql(name: str) -> str:
    """The statement that makes the view ``name``, as SQLite keeps it in ``sqlite_master``."""
    return f"CREATE VIEW {quote(name)} AS {VIEWS[name]}"


def stale_views(stored: dict[str, str]) -> list[str]:
    """The layout's views missing from ``stored`` (``sqlite_master``'s name -> sql) or made by an
    older definition."""
    return [name for name in LAYOUT_VIEWS if stored.get(name) != view_sql(name)]
