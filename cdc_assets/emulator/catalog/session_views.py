"""``sys.dm_exec_sessions`` and ``sys.system_views``: what clients ask about their own session.

SQLAlchemy's ``Connection.get_isolation_level()`` looks in ``sys.system_views`` for
``dm_exec_sessions``, then reads ``transaction_isolation_level`` of ``session_id = @@SPID`` there;
monitoring tools read the same view. The emulator shows the calling session only (SQL Server
shows every session to a login with VIEW SERVER STATE), with its login, login time, open
transaction count and isolation level (1 READ UNCOMMITTED ... 5 SNAPSHOT: the level the session
runs at, so READ UNCOMMITTED shows as 2, READ COMMITTED, which the emulator gives instead). The
columns are the documented ones, in order; what the emulator does not track is a constant
(counters 0, SET options as SQL Server's defaults for ODBC connections).
"""

from __future__ import annotations

from ..values import types as T
from ..values.types import SqlType
from .constraint_views import OBJECT_COLUMNS

Columns = tuple[tuple[str, SqlType], ...]

ISOLATION_CODES = {
    "READ UNCOMMITTED": 1,
    "READ COMMITTED": 2,
    "REPEATABLE READ": 3,
    "SERIALIZABLE": 4,
    "SNAPSHOT": 5,
}

_N128 = T.nvarchar(128)
_SID = SqlType("varbinary", length=85)

OBJECTS: tuple[tuple[str, Columns], ...] = (
    (
        "dm_exec_sessions",
        (
            ("session_id", T.SMALLINT),
            ("login_time", T.DATETIME),
            ("host_name", _N128),
            ("program_name", _N128),
            ("host_process_id", T.INT),
            ("client_version", T.INT),
            ("client_interface_name", T.nvarchar(32)),
            ("security_id", _SID),
            ("login_name", _N128),
            ("nt_domain", _N128),
            ("nt_user_name", _N128),
            ("status", T.nvarchar(30)),
            ("context_info", T.VARBINARY128),
            ("cpu_time", T.INT),
            ("memory_usage", T.INT),
            ("total_scheduled_time", T.INT),
            ("total_elapsed_time", T.INT),
            ("endpoint_id", T.INT),
            ("last_request_start_time", T.DATETIME),
            ("last_request_end_time", T.DATETIME),
            ("reads", T.BIGINT),
            ("writes", T.BIGINT),
            ("logical_reads", T.BIGINT),
            ("is_user_process", T.BIT),
            ("text_size", T.INT),
            ("language", _N128),
            ("date_format", T.nvarchar(3)),
            ("date_first", T.SMALLINT),
            ("quoted_identifier", T.BIT),
            ("arithabort", T.BIT),
            ("ansi_null_dflt_on", T.BIT),
            ("ansi_defaults", T.BIT),
            ("ansi_warnings", T.BIT),
            ("ansi_padding", T.BIT),
            ("ansi_nulls", T.BIT),
            ("concat_null_yields_null", T.BIT),
            ("transaction_isolation_level", T.SMALLINT),
            ("lock_timeout", T.INT),
            ("deadlock_priority", T.INT),
            ("row_count", T.BIGINT),
            ("prev_error", T.INT),
            ("original_security_id", _SID),
            ("original_login_name", _N128),
            ("last_successful_logon", T.DATETIME),
            ("last_unsuccessful_logon", T.DATETIME),
            ("unsuccessful_logons", T.BIGINT),
            ("group_id", T.INT),
            ("database_id", T.SMALLINT),
            ("authenticating_database_id", T.INT),
            ("open_transaction_count", T.INT),
        ),
    ),
    ("system_views", OBJECT_COLUMNS),
)

_SESSION = """
        SELECT _emu_spid() AS session_id, _emu_login_time() AS login_time,
               NULL AS host_name, NULL AS program_name, NULL AS host_process_id,
               7 AS client_version, 'ODBC' AS client_interface_name, NULL AS security_id,
               _emu_login() AS login_name, '' AS nt_domain, '' AS nt_user_name,
               'running' AS status, NULL AS context_info, 0 AS cpu_time, 0 AS memory_usage,
               0 AS total_scheduled_time, 0 AS total_elapsed_time, 2 AS endpoint_id,
               NULL AS last_request_start_time, NULL AS last_request_end_time, 0 AS reads,
               0 AS writes, 0 AS logical_reads, 1 AS is_user_process, 2147483647 AS text_size,
               'us_english' AS language, 'mdy' AS date_format, 7 AS date_first,
               1 AS quoted_identifier, 1 AS arithabort, 1 AS ansi_null_dflt_on,
               0 AS ansi_defaults, 1 AS ansi_warnings, 1 AS ansi_padding, 1 AS ansi_nulls,
               1 AS concat_null_yields_null,
               _emu_isolation_level() AS transaction_isolation_level, -1 AS lock_timeout,
               0 AS deadlock_priority, 0 AS row_count, 0 AS prev_error,
               NULL AS original_security_id, _emu_login() AS original_login_name,
               NULL AS last_successful_logon, NULL AS last_unsuccessful_logon,
               NULL AS unsuccessful_logons, 2 AS group_id, 5 AS database_id,
               1 AS authenticating_database_id, _emu_trancount() AS open_transaction_count"""


def system_views_sql(names: list[str]) -> str:
    """``sys.system_views`` over the emulator's ``sys`` views ``names`` (negative object ids, as
    SQL Server's system objects have)."""
    rows = ", ".join(
        f"('{name}', {-(100 + i)})" for i, name in enumerate(sorted(names, key=str.lower))
    )
    return f"""
        SELECT column1 AS name, column2 AS object_id, NULL AS principal_id, 4 AS schema_id,
               0 AS parent_object_id, 'V ' AS type, 'VIEW' AS type_desc,
               '2022-10-08 06:29:00.0000000' AS create_date,
               '2022-10-08 06:29:00.0000000' AS modify_date,
               1 AS is_ms_shipped, 0 AS is_published, 0 AS is_schema_published
        FROM (VALUES {rows})"""


VIEWS: dict[str, str] = {"sys.dm_exec_sessions": _SESSION}
