"""The system tables and views an emulated database has: their SQL Server names and typed columns.

Tables (``cdc.*`` made by ``sys.sp_cdc_enable_db``, ``msdb.dbo.cdc_jobs``, the agent's scan
sessions) and views (``sys.*``, ``INFORMATION_SCHEMA.*``: their SQL is in :mod:`.system_views`);
:mod:`.catalog` resolves a name to one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..values import types as T
from ..values.types import SqlType
from . import constraint_views, principal_views, session_views


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
    *(SystemObject("sys", name, columns) for name, columns in principal_views.OBJECTS),
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


CDC_OBJECT_NAMES = tuple(o for o in SYSTEM_OBJECTS if o.requires_cdc)
