"""Is capture alive and how far behind is it: the CDC jobs, the last log scan, the LSN interval.

:func:`capture_health` gathers, in a handful of queries, what an operator asks first when a mirror
stops moving: is there a capture job, is it running (SQL Server Agent's job activity), when did
it last scan the log and with what latency, what is the max LSN and its commit time, and where
each capture instance's validity interval starts (cleanup moves it up).
The verdict (what is wrong and what to do) is the capture-health asset check's
(``cdc_assets.dagster.health_checks.assess``); this layer only gathers the facts.

Parts the login may not see (``msdb`` job tables, ``sys.dm_cdc_log_scan_sessions`` needs VIEW
DATABASE STATE) are reported as unknown (``None``) and named in ``unavailable``, never guessed.

https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/dbo-cdc-jobs-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-dynamic-management-views/change-data-capture-sys-dm-cdc-log-scan-sessions
https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/dbo-sysjobactivity-transact-sql
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from cdc_assets.lsn import Lsn

from .cdc_admin import change_job
from .dbapi import DbapiConnection, fetch_all, fetch_value
from .errors import PermissionDenied, SqlServerError
from .lsn_queries import find_max_lsn, map_lsn_to_time

__all__ = [
    "CaptureHealth",
    "CdcJob",
    "LogScan",
    "capture_health",
    "get_cdc_jobs",
    "get_job_running",
    "get_last_scan",
    "get_server_time",
    "set_cleanup_retention",
]


@dataclass(frozen=True)
class CaptureHealth:
    """A snapshot of the capture process of one database (times are server local time)."""

    job_configured: bool | None  # a capture job exists in msdb.dbo.cdc_jobs
    polling_interval_s: int | None
    maxtrans: int | None
    retention_minutes: int | None  # the cleanup job's retention
    last_scan_end: dt.datetime | None
    latency_s: int | None  # of the last scan: its end time minus the last commit time it saw
    max_lsn: Lsn | None
    max_lsn_time: dt.datetime | None
    min_lsn_per_instance: dict[str, Lsn | None]
    job_running: bool | None = None  # from SQL Server Agent's activity; None: not visible
    continuous: bool | None = None
    last_scan_errors: int | None = None
    server_time: dt.datetime | None = None
    unavailable: tuple[str, ...] = field(default=())

    @property
    def stopped(self) -> bool:
        """SQL Server Agent reports no running session of a continuous capture job (a one-shot
        job is "not running" between its scheduled runs)."""
        return self.job_running is False and self.continuous is not False

    @property
    def seconds_since_last_scan(self) -> float | None:
        if self.last_scan_end is None or self.server_time is None:
            return None
        return (self.server_time - self.last_scan_end).total_seconds()


@dataclass(frozen=True)
class CdcJob:
    """One row of ``msdb.dbo.cdc_jobs`` (the capture job uses the first four settings, the
    cleanup job the last two)."""

    job_type: str  # capture or cleanup
    maxtrans: int | None
    maxscans: int | None
    continuous: bool | None
    polling_interval_s: int | None
    retention_minutes: int | None
    threshold: int | None


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/dbo-cdc-jobs-transact-sql
JOBS_QUERY = """
SELECT job_type, maxtrans, maxscans, continuous, pollinginterval, retention, threshold
FROM msdb.dbo.cdc_jobs WHERE database_id = DB_ID()
"""


def get_cdc_jobs(conn: DbapiConnection) -> dict[str, CdcJob]:
    """The CDC jobs of the current database by job type (``capture``, ``cleanup``)."""
    jobs = {}
    for job_type, maxtrans, maxscans, continuous, polling, retention, threshold in fetch_all(
        conn, JOBS_QUERY
    ):
        jobs[str(job_type)] = CdcJob(
            str(job_type),
            _int(maxtrans),
            _int(maxscans),
            None if continuous is None else bool(continuous),
            _int(polling),
            _int(retention),
            _int(threshold),
        )
    return jobs


@dataclass(frozen=True)
class LogScan:
    """One row of ``sys.dm_cdc_log_scan_sessions`` (times are server local time)."""

    session_id: int
    start_time: dt.datetime | None
    end_time: dt.datetime | None
    tran_count: int | None
    command_count: int | None
    latency_s: int | None  # the scan's end time minus the last commit time it saw
    last_commit_lsn: str | None  # as SQL Server shows it: 'xxxxxxxx:xxxxxxxx:xxxx'
    last_commit_time: dt.datetime | None
    error_count: int | None


# https://learn.microsoft.com/en-us/sql/relational-databases/system-dynamic-management-views/change-data-capture-sys-dm-cdc-log-scan-sessions
LAST_SCAN_QUERY = """
SELECT TOP (1) session_id, start_time, end_time, tran_count, command_count, latency,
       last_commit_lsn, last_commit_time, error_count
FROM sys.dm_cdc_log_scan_sessions ORDER BY session_id DESC
"""


def get_last_scan(conn: DbapiConnection) -> LogScan | None:
    """The latest log scan session of the capture job; None before the first scan."""
    rows = fetch_all(conn, LAST_SCAN_QUERY)
    if not rows:
        return None
    session, start, end, trans, commands, latency, lsn, commit_time, errors = rows[0]
    return LogScan(
        int(session),
        start,
        end,
        _int(trans),
        _int(commands),
        _int(latency),
        None if lsn is None else str(lsn),
        commit_time,
        _int(errors),
    )


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/dbo-sysjobactivity-transact-sql
# Added to CONTRACT.md by the SQL Server layer: a CDC job's latest agent activity.
JOB_ACTIVITY_QUERY = """
SELECT TOP (1) ja.start_execution_date, ja.stop_execution_date
FROM msdb.dbo.cdc_jobs AS cj
JOIN msdb.dbo.sysjobactivity AS ja ON ja.job_id = cj.job_id
WHERE cj.database_id = DB_ID() AND cj.job_type = ?
ORDER BY ja.session_id DESC
"""


def get_job_running(conn: DbapiConnection, job_type: str = "capture") -> bool:
    """Whether SQL Server Agent runs the CDC job ``job_type`` now (started, not stopped)."""
    activity = fetch_all(conn, JOB_ACTIVITY_QUERY, job_type)
    return bool(activity) and activity[0][0] is not None and activity[0][1] is None


def set_cleanup_retention(conn: DbapiConnection, minutes: int) -> None:
    """How long the cleanup job keeps changes (what a DBA sets); SQL Server applies it when the
    cleanup job next starts."""
    change_job(conn, "cleanup", retention=minutes)


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-change-tables-transact-sql
# Added to CONTRACT.md: start_lsn is what sys.fn_cdc_get_min_lsn returns, for all instances at once.
INSTANCE_STARTS_QUERY = (
    "SELECT capture_instance, start_lsn FROM cdc.change_tables ORDER BY capture_instance"
)

# https://learn.microsoft.com/en-us/sql/t-sql/functions/sysdatetime-transact-sql
SERVER_TIME_QUERY = "SELECT SYSDATETIME()"


def get_server_time(conn: DbapiConnection) -> dt.datetime | None:
    """The server's local time now (naive, as commit times are)."""
    value = fetch_value(conn, SERVER_TIME_QUERY)
    return value if isinstance(value, dt.datetime) else None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


# Errors that mean "this login cannot see that", or that the object does not exist here.
_NOT_VISIBLE = (208, 229, 230, 297, 300)


def _optional(exc: SqlServerError) -> bool:
    return isinstance(exc, PermissionDenied) or exc.native_error in _NOT_VISIBLE


def capture_health(conn: DbapiConnection) -> CaptureHealth:
    """The capture process's state (see :class:`CaptureHealth`); needs CDC on the database."""
    unavailable: list[str] = []

    jobs: dict[str, CdcJob] | None
    try:
        jobs = get_cdc_jobs(conn)
    except SqlServerError as exc:
        if not _optional(exc):
            raise
        jobs = None
        unavailable.append("msdb.dbo.cdc_jobs")
    capture = jobs.get("capture") if jobs else None
    cleanup = jobs.get("cleanup") if jobs else None

    job_running: bool | None = None
    if capture is not None:
        try:
            job_running = get_job_running(conn, "capture")
        except SqlServerError as exc:
            if not _optional(exc):
                raise
            unavailable.append("msdb.dbo.sysjobactivity")

    scan = None
    try:
        scan = get_last_scan(conn)
    except SqlServerError as exc:
        if not _optional(exc):
            raise
        unavailable.append("sys.dm_cdc_log_scan_sessions")

    max_lsn = find_max_lsn(conn)
    max_lsn_time = map_lsn_to_time(conn, max_lsn) if max_lsn is not None else None
    starts = {
        name: Lsn.from_bytes(start) if start is not None else None
        for name, start in fetch_all(conn, INSTANCE_STARTS_QUERY)
    }
    server_time = get_server_time(conn)

    return CaptureHealth(
        job_configured=None if jobs is None else capture is not None,
        polling_interval_s=capture.polling_interval_s if capture else None,
        maxtrans=capture.maxtrans if capture else None,
        retention_minutes=cleanup.retention_minutes if cleanup else None,
        last_scan_end=scan.end_time if scan is not None else None,
        latency_s=scan.latency_s if scan is not None else None,
        max_lsn=max_lsn,
        max_lsn_time=max_lsn_time,
        min_lsn_per_instance=starts,
        job_running=job_running,
        continuous=capture.continuous if capture else None,
        last_scan_errors=scan.error_count if scan is not None else None,
        server_time=server_time,
        unavailable=tuple(unavailable),
    )
