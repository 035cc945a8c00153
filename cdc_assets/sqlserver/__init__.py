"""The SQL Server CDC source layer: DB-API only (pyodbc or the emulator), no Dagster, no Spark.

One module per concern, each with its T-SQL as constants next to the function that sends it:

- :mod:`.connection` — settings (ODBC Driver 18 / FreeTDS, or naming their own) and factories
- :mod:`.catalog` — capture instances, captured and key columns, the current instance
- :mod:`.lsn_queries` — min/max LSN, increment/decrement, LSN <-> commit time
- :mod:`.changes` — change rows of an LSN range as Arrow batches, with validity checks
- :mod:`.ranges` — the next LSN range, capped by a number of transactions
- :mod:`.snapshot` — exact (snapshot isolation) and fuzzy snapshots and their LSN
- :mod:`.health` — capture job, scan latency, validity intervals
- :mod:`.cdc_admin` — enabling CDC, the CDC jobs, scans and cleanup (the demo, tests, benchmarks)
- :mod:`.arrow_types` — SQL Server types as Arrow types
- :mod:`.errors`, :mod:`.quoting`, :mod:`.dbapi` — errors, identifier quoting, DB-API plumbing
"""

from .catalog import (
    CaptureInstance,
    Column,
    DatabaseInfo,
    SourceTable,
    database_info,
    discover,
    table_exists,
)
from .changes import (
    changed_lsns,
    count_change_rows,
    count_changes,
    count_changes_unchecked,
    read_changes,
    read_function_changes,
)
from .connection import (
    ConnectionFactory,
    ConnectionSettings,
    DsnSettings,
    OdbcSettings,
    connection_factory,
)
from .errors import (
    CaptureInstanceNotFound,
    CaptureNotReady,
    CdcNotEnabled,
    KeylessTableNeedsSnapshotIsolation,
    LockTimeout,
    LoginFailed,
    LsnNotAvailable,
    PermissionDenied,
    SnapshotIsolationNotAllowed,
    SourceUnreachable,
    SqlServerError,
    translate_dbapi_error,
)
from .health import (
    CaptureHealth,
    CdcJob,
    LogScan,
    capture_health,
    get_cdc_jobs,
    get_job_running,
    get_last_scan,
    get_server_time,
    set_cleanup_retention,
)
from .lsn_queries import (
    decrement_lsn,
    find_max_lsn,
    get_max_lsn,
    get_min_lsn,
    increment_lsn,
    map_lsn_to_time,
    map_time_to_lsn,
    wait_for_max_lsn,
)
from .ranges import (
    RangeStats,
    committed_before,
    last_transaction_lsn,
    plan_next_range,
    range_stats,
    transaction_commits,
)
from .snapshot import (
    ExactSnapshot,
    KeyRange,
    SnapshotRead,
    SnapshotResult,
    begin_exact_snapshot,
    count_rows,
    snapshot_table,
)

__all__ = [
    "CaptureHealth",
    "CaptureInstance",
    "CaptureInstanceNotFound",
    "CaptureNotReady",
    "CdcJob",
    "CdcNotEnabled",
    "Column",
    "ConnectionFactory",
    "ConnectionSettings",
    "DatabaseInfo",
    "DsnSettings",
    "ExactSnapshot",
    "KeyRange",
    "KeylessTableNeedsSnapshotIsolation",
    "LockTimeout",
    "LogScan",
    "LoginFailed",
    "LsnNotAvailable",
    "OdbcSettings",
    "PermissionDenied",
    "RangeStats",
    "SnapshotIsolationNotAllowed",
    "SnapshotRead",
    "SnapshotResult",
    "SourceTable",
    "SourceUnreachable",
    "SqlServerError",
    "begin_exact_snapshot",
    "capture_health",
    "changed_lsns",
    "committed_before",
    "connection_factory",
    "count_change_rows",
    "count_changes",
    "count_changes_unchecked",
    "count_rows",
    "database_info",
    "decrement_lsn",
    "discover",
    "find_max_lsn",
    "get_cdc_jobs",
    "get_job_running",
    "get_last_scan",
    "get_max_lsn",
    "get_min_lsn",
    "get_server_time",
    "increment_lsn",
    "last_transaction_lsn",
    "map_lsn_to_time",
    "map_time_to_lsn",
    "plan_next_range",
    "range_stats",
    "read_changes",
    "read_function_changes",
    "set_cleanup_retention",
    "snapshot_table",
    "table_exists",
    "transaction_commits",
    "translate_dbapi_error",
    "wait_for_max_lsn",
]
