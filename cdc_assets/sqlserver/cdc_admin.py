"""Administering CDC: the system procedures a DBA runs to set capture up and keep it going.

What the demo, the tests and the benchmarks send to a source (SQL Server or the emulator) to
enable CDC on the database and its tables, stop, start and tune the CDC jobs, run one capture scan
and clean a change table up. The sync itself never calls these: it only reads (DESIGN.md).

Each procedure call is a :class:`Statement`: its arguments are named, sent as ``?`` parameters
(:attr:`Statement.sql`, :attr:`Statement.params`), and arguments left out take the procedure's
default. :attr:`Statement.text` is the same call with its values written as literals, for messages
and scripts an operator copies. Job types are checked against the two SQL Server knows.

https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/change-data-capture-stored-procedures-transact-sql
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cdc_assets.lsn import Lsn

from .dbapi import DbapiConnection, execute, fetch_value
from .quoting import validate_identifier

__all__ = [
    "JOB_TYPES",
    "JobType",
    "Statement",
    "change_job",
    "cleanup_change_table",
    "database_enabled",
    "disable_table",
    "enable_database",
    "enable_table",
    "enable_table_statement",
    "restart_job",
    "run",
    "scan",
    "start_job",
    "start_job_statement",
    "stop_job",
    "stop_job_statement",
]

JobType = Literal["capture", "cleanup"]
JOB_TYPES: tuple[JobType, ...] = ("capture", "cleanup")


@dataclass(frozen=True)
class Statement:
    """``EXEC sys.<procedure>`` with named arguments (``None`` values are passed as NULL)."""

    procedure: str
    arguments: tuple[tuple[str, Any], ...] = ()

    @property
    def sql(self) -> str:
        """The call with ``?`` for every argument."""
        return self._render(lambda _: "?")

    @property
    def params(self) -> tuple[Any, ...]:
        """The values for :attr:`sql`'s ``?``, in order (an :class:`Lsn` as its 10 bytes)."""
        return tuple(v.raw if isinstance(v, Lsn) else v for _, v in self.arguments)

    @property
    def text(self) -> str:
        """The call with its values as T-SQL literals (``N'...'``, ``1``, ``0x...``, ``NULL``)."""
        return self._render(_literal)

    def _render(self, value: Any) -> str:
        args = ", ".join(f"@{name} = {value(v)}" for name, v in self.arguments)
        return f"EXEC sys.{self.procedure}" + (f" {args}" if args else "")


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Lsn):
        value = value.raw
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex().upper()
    if isinstance(value, str):
        return "N'" + value.replace("'", "''") + "'"
    raise TypeError(f"no T-SQL literal for {type(value).__name__}")


def _call(procedure: str, **arguments: Any) -> Statement:
    """``procedure`` with the ``arguments`` that are not ``None`` (the others keep defaults)."""
    return Statement(procedure, tuple((k, v) for k, v in arguments.items() if v is not None))


def run(conn: DbapiConnection, statement: Statement) -> None:
    """Send ``statement`` (driver errors become :class:`~.errors.SqlServerError`)."""
    execute(conn, statement.sql, *statement.params).close()


def _name(name: str | None) -> str | None:
    return None if name is None else validate_identifier(name)


def _job_type(job_type: str) -> JobType:
    for known in JOB_TYPES:
        if job_type == known:
            return known
    raise ValueError(f"job_type is 'capture' or 'cleanup'; got {job_type!r}")


# -- the database ------------------------------------------------------------------------------

# https://learn.microsoft.com/en-us/sql/relational-databases/system-catalog-views/sys-databases-transact-sql
CDC_ENABLED_QUERY = "SELECT is_cdc_enabled FROM sys.databases WHERE database_id = DB_ID()"


def database_enabled(conn: DbapiConnection) -> bool:
    """Whether CDC is enabled on the current database."""
    return bool(fetch_value(conn, CDC_ENABLED_QUERY))


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-enable-db-transact-sql
def enable_database(conn: DbapiConnection) -> None:
    """``sys.sp_cdc_enable_db``: CDC on the current database (sysadmin; creates the capture and
    cleanup jobs)."""
    run(conn, _call("sp_cdc_enable_db"))


# -- tables ------------------------------------------------------------------------------------


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-enable-table-transact-sql
def enable_table_statement(
    schema: str,
    table: str,
    *,
    capture_instance: str | None = None,
    supports_net_changes: bool | None = None,
    captured_columns: Sequence[str] | None = None,
    role_name: str | None = None,
    index_name: str | None = None,
) -> Statement:
    """``sys.sp_cdc_enable_table`` for ``schema.table``.

    ``role_name`` None: no gating role (``@role_name = NULL``). ``supports_net_changes`` None:
    SQL Server's default (net changes when the table has a primary key). ``captured_columns``
    None: every column. ``capture_instance`` None: ``<schema>_<table>``.
    """
    columns = None
    if captured_columns is not None:
        columns = ", ".join(validate_identifier(c) for c in captured_columns)
    call = _call(
        "sp_cdc_enable_table",
        source_schema=validate_identifier(schema),
        source_name=validate_identifier(table),
        capture_instance=_name(capture_instance),
        supports_net_changes=supports_net_changes,
        captured_column_list=columns,
        index_name=_name(index_name),
    )
    role = ("role_name", _name(role_name))  # a required argument, NULL for no role
    return Statement(call.procedure, (*call.arguments[:2], role, *call.arguments[2:]))


def enable_table(
    conn: DbapiConnection,
    schema: str,
    table: str,
    *,
    capture_instance: str | None = None,
    supports_net_changes: bool | None = None,
    captured_columns: Sequence[str] | None = None,
    role_name: str | None = None,
    index_name: str | None = None,
) -> None:
    """Enable CDC on ``schema.table`` (see :func:`enable_table_statement`)."""
    statement = enable_table_statement(
        schema,
        table,
        capture_instance=capture_instance,
        supports_net_changes=supports_net_changes,
        captured_columns=captured_columns,
        role_name=role_name,
        index_name=index_name,
    )
    run(conn, statement)


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-disable-table-transact-sql
def disable_table(
    conn: DbapiConnection, schema: str, table: str, capture_instance: str = "all"
) -> None:
    """``sys.sp_cdc_disable_table``: drop one capture instance of ``schema.table`` (``all``: every
    one, and the table is no longer tracked)."""
    statement = _call(
        "sp_cdc_disable_table",
        source_schema=validate_identifier(schema),
        source_name=validate_identifier(table),
        capture_instance=validate_identifier(capture_instance),
    )
    run(conn, statement)


# -- jobs --------------------------------------------------------------------------------------


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-start-job-transact-sql
def start_job_statement(job_type: JobType = "capture") -> Statement:
    """``sys.sp_cdc_start_job`` (an operator's fix for a stopped capture job)."""
    return _call("sp_cdc_start_job", job_type=_job_type(job_type))


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-stop-job-transact-sql
def stop_job_statement(job_type: JobType = "capture") -> Statement:
    """``sys.sp_cdc_stop_job``."""
    return _call("sp_cdc_stop_job", job_type=_job_type(job_type))


def start_job(conn: DbapiConnection, job_type: JobType = "capture") -> None:
    """Start the CDC job ``job_type`` (capture resumes where it stopped: the log keeps changes)."""
    run(conn, start_job_statement(job_type))


def stop_job(conn: DbapiConnection, job_type: JobType = "capture") -> None:
    """Stop the CDC job ``job_type``."""
    run(conn, stop_job_statement(job_type))


def restart_job(conn: DbapiConnection, job_type: JobType = "capture") -> None:
    """Stop and start ``job_type``: how settings of :func:`change_job` take effect."""
    stop_job(conn, job_type)
    start_job(conn, job_type)


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-change-job-transact-sql
def change_job(
    conn: DbapiConnection,
    job_type: JobType = "capture",
    *,
    maxtrans: int | None = None,
    maxscans: int | None = None,
    continuous: bool | None = None,
    polling_interval: int | None = None,
    retention: int | None = None,
    threshold: int | None = None,
) -> None:
    """``sys.sp_cdc_change_job``: the settings given (others unchanged); SQL Server applies them
    when the job next starts. ``maxtrans``, ``maxscans``, ``continuous`` and ``polling_interval``
    (seconds) are the capture job's; ``retention`` (minutes) and ``threshold`` the cleanup job's."""
    statement = _call(
        "sp_cdc_change_job",
        job_type=_job_type(job_type),
        maxtrans=maxtrans,
        maxscans=maxscans,
        continuous=continuous,
        pollinginterval=polling_interval,
        retention=retention,
        threshold=threshold,
    )
    run(conn, statement)


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-scan-transact-sql
def scan(
    conn: DbapiConnection, *, maxtrans: int | None = None, maxscans: int | None = None
) -> None:
    """``sys.sp_cdc_scan``: one capture scan now, what the capture job does each polling interval
    (on SQL Server, only while the capture job is not running)."""
    run(conn, _call("sp_cdc_scan", maxtrans=maxtrans, maxscans=maxscans))


# https://learn.microsoft.com/en-us/sql/relational-databases/system-stored-procedures/sys-sp-cdc-cleanup-change-table-transact-sql
def cleanup_change_table(
    conn: DbapiConnection,
    capture_instance: str,
    low_water_mark: Lsn | bytes,
    *,
    threshold: int | None = None,
) -> None:
    """``sys.sp_cdc_cleanup_change_table``: delete the changes of ``capture_instance`` below
    ``low_water_mark`` (its min LSN moves up to it), in deletes of at most ``threshold`` rows."""
    statement = _call(
        "sp_cdc_cleanup_change_table",
        capture_instance=validate_identifier(capture_instance),
        low_water_mark=low_water_mark,
        threshold=threshold,
    )
    run(conn, statement)
