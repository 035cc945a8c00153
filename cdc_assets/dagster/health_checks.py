"""Is the source's capture job alive: one health check per change log, run on demand.

``capture_health`` (a check on every ``cdc/<source>/<schema>/<table>``) reads the capture state of
the source database once per execution (:func:`cdc_assets.sqlserver.capture_health`: a handful
of queries, whatever the number of tables) and yields one result per selected table:

- **fails, severity ERROR**, when capture is not running, so changes stop reaching the change
  tables and every mirror stops moving while the source keeps writing:

  - the capture job is reported stopped (SQL Server Agent's ``msdb.dbo.sysjobactivity`` has no
    running session for it: ``sys.sp_cdc_stop_job``, a failed job, ...);
  - the job is reported running but has not scanned the log for longer than
    :data:`STALL_SECONDS` (or :data:`STALL_POLLING_INTERVALS` polling intervals, if longer):
    SQL Server Agent stopped, or the job hangs. A continuous capture job scans every polling
    interval (5 s by default) even when nothing changes, and consecutive empty scans update the
    end time of one session row (``empty_scan_count``), so a stale last scan session means the
    max LSN cannot move however much the log advances. (That is how the emulator implements
    ``sys.dm_cdc_log_scan_sessions``; confirm it on a real server before paging on it. The
    DMV is empty after an instance restart until the first scan: treated as not visible.)
  - there is no capture job, nothing was ever captured (max LSN NULL), or the last scan session
    reported errors;

- **fails, severity WARN**, when capture runs but late: the last scan's latency (its end minus
  the commit time of the last transaction it captured) is above :data:`LAG_WARN_SECONDS`; or
  when the scan sessions are not visible to the login and the max LSN has not moved for longer
  than the stall limit (capture may be stalled, or the source quiet: cannot tell); or when the
  table's capture instance no longer exists.

A stopped capture job loses nothing: the transaction log keeps every change until capture has
read it (it cannot be truncated past it), so after ``sys.sp_cdc_start_job`` capture catches up
and the sync sensor's next range starts exactly where the chain ended — no gap, no re-snapshot.
The log grows meanwhile, which is why this check is an ERROR.

Parts the login may not see (``msdb``, ``VIEW DATABASE STATE``) are reported as ``unknown`` in
the metadata and never guessed into an ERROR.

On demand: the UI's "Execute checks" on the change logs, or ``materialize`` with
``AssetSelection.checks(capture_checks)``. The sync job selects the change logs, so it runs this
(non-blocking) check after every range too — but the sensor only starts runs when the max LSN
moves, i.e. never while capture is stopped. To evaluate it periodically, add a job selecting
only these checks and a schedule for it (see :func:`build_capture_checks`).
"""

# No ``from __future__ import annotations``: Dagster checks the ``context`` annotation at runtime.
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    multi_asset_check,
)

from cdc_assets.sqlserver import CaptureHealth, SqlServerError, capture_health
from cdc_assets.sqlserver.cdc_admin import start_job_statement, stop_job_statement
from cdc_assets.sqlserver.errors import SourceUnreachable

from .sync.source import CapturedTable, Source

CAPTURE_HEALTH = "capture_health"

#: Capture latency (seconds) of the last log scan above which the check warns. The latency of a
#: scan is its end time minus the commit time of the last transaction it captured; a healthy
#: continuous capture job stays within a few polling intervals (5 s each by default).
LAG_WARN_SECONDS = 60.0
#: No log scan for this long (seconds) while the job is reported running: capture is stalled.
#: Five minutes: far above the default 5 s polling interval and a long catch-up scan, short
#: enough to page before the transaction log grows much.
STALL_SECONDS = 300.0
#: ... or this many polling intervals of the capture job, if that is longer (slow polling).
STALL_POLLING_INTERVALS = 10

START_CAPTURE = start_job_statement("capture").text
RESTART_CAPTURE = f"{stop_job_statement('capture').text}; {START_CAPTURE}"
NO_GAP = (
    "sync resumes without a gap (the log keeps every change until capture has read it; it "
    "grows meanwhile)"
)


@dataclass(frozen=True)
class Assessment:
    """What the capture state means for the check: ERROR sentences, WARN sentences, metadata."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> AssetCheckSeverity | None:
        """None when healthy."""
        if self.errors:
            return AssetCheckSeverity.ERROR
        if self.warnings:
            return AssetCheckSeverity.WARN
        return None


def _time(value: dt.datetime | None) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value is not None else "unknown"


def _known(value: Any) -> Any:
    return "unknown" if value is None else value


def stall_limit(health: CaptureHealth, stall_s: float = STALL_SECONDS) -> float:
    """Seconds without a log scan after which a running capture job counts as stalled."""
    polling = health.polling_interval_s or 0
    return max(stall_s, STALL_POLLING_INTERVALS * float(polling))


def assess(
    health: CaptureHealth,
    *,
    lag_warn_s: float = LAG_WARN_SECONDS,
    stall_s: float = STALL_SECONDS,
) -> Assessment:
    """The source-wide verdict on ``health`` (the per-table part is added by :func:`_result`)."""
    errors: list[str] = []
    warnings: list[str] = []
    limit = stall_limit(health, stall_s)
    since_scan = health.seconds_since_last_scan
    max_lsn_age = (
        (health.server_time - health.max_lsn_time).total_seconds()
        if health.server_time is not None and health.max_lsn_time is not None
        else None
    )
    max_lsn = health.max_lsn.hex if health.max_lsn is not None else "NULL"

    if health.job_configured is False:
        errors.append(
            "No CDC capture job exists for this database (msdb.dbo.cdc_jobs): nothing is being "
            "captured. Create and start it: EXEC sys.sp_cdc_add_job @job_type = N'capture'; "
            f"{NO_GAP}."
        )
    elif health.stopped:
        errors.append(
            "The CDC capture job is stopped (SQL Server Agent reports no running session): "
            f"changes no longer reach the change tables, the max LSN stays at {max_lsn} "
            f"(committed {_time(health.max_lsn_time)}) and the mirrors stop moving. Start the "
            f"capture job: {START_CAPTURE}; {NO_GAP}. If it stops again, check that SQL Server "
            "Agent runs and read the job's history."
        )
    if not health.stopped:
        if since_scan is not None and since_scan > limit:
            errors.append(
                f"The capture job has not scanned the log for {since_scan:.0f} s (last scan "
                f"ended {_time(health.last_scan_end)}; limit {limit:.0f} s) although it is "
                f"{'reported running' if health.job_running else 'configured'}: SQL Server "
                f"Agent is stopped or the job hangs, and the max LSN ({max_lsn}) cannot move. "
                f"Restart the capture job: {RESTART_CAPTURE}; check SQL Server Agent; {NO_GAP}."
            )
        elif since_scan is None and max_lsn_age is not None and max_lsn_age > limit:
            warnings.append(
                f"The max LSN ({max_lsn}) has not moved for {max_lsn_age:.0f} s and the log "
                "scan sessions are not visible (sys.dm_cdc_log_scan_sessions needs VIEW "
                "DATABASE STATE): either the source is quiet or capture is stalled. If the "
                f"source has committed changes since, restart the capture job: {RESTART_CAPTURE}."
            )
    if health.max_lsn is None and health.job_configured is not False:
        errors.append(
            "The capture job has not captured anything yet (sys.fn_cdc_get_max_lsn() is NULL). "
            f"Make sure it runs: {START_CAPTURE}."
        )
    if health.last_scan_errors:
        errors.append(
            f"The last log scan session reported {health.last_scan_errors} error(s): see "
            "sys.dm_cdc_errors and the capture job's history, fix the cause, then restart the "
            f"capture job: {RESTART_CAPTURE}."
        )
    if health.latency_s is not None and health.latency_s > lag_warn_s:
        warnings.append(
            f"Capture latency is {health.latency_s} s (more than {lag_warn_s:g} s): changes "
            "reach the change tables, and so the mirrors, that late. Usually a burst of writes "
            "or a catch-up after a stop; if it keeps growing, raise @maxtrans / @maxscans with "
            "sys.sp_cdc_change_job and restart the capture job."
        )

    metadata: dict[str, Any] = {
        "job_running": _known(health.job_running),
        "last_scan_end": _time(health.last_scan_end),
        "seconds_since_last_scan": _known(round(since_scan, 1) if since_scan is not None else None),
        "capture_latency_s": _known(health.latency_s),
        "max_lsn": max_lsn,
        "max_lsn_time": _time(health.max_lsn_time),
        "max_lsn_age_s": _known(round(max_lsn_age, 1) if max_lsn_age is not None else None),
        "polling_interval_s": _known(health.polling_interval_s),
        "stall_limit_s": limit,
        "lag_warn_s": lag_warn_s,
    }
    if health.unavailable:
        metadata["not_visible"] = ", ".join(health.unavailable)
    return Assessment(errors, warnings, metadata)


def _result(
    table: CapturedTable, health: CaptureHealth, source_wide: Assessment
) -> AssetCheckResult:
    name = table.instance.name
    warnings = list(source_wide.warnings)
    if name not in health.min_lsn_per_instance:
        warnings.append(
            f"Capture instance {name} no longer exists (sys.sp_cdc_help_change_data_capture): "
            "the table was disabled for CDC or re-enabled under a new instance. Reload the code "
            "location; the sync re-snapshots the table."
        )
    verdict = Assessment(source_wide.errors, warnings)
    min_lsn = health.min_lsn_per_instance.get(name)
    metadata = {
        **source_wide.metadata,
        "capture_instance": name,
        "min_lsn": min_lsn.hex if min_lsn is not None else "unknown",
    }
    severity = verdict.severity
    if severity is None:
        description = (
            f"Capture is running: last log scan {_known(metadata['seconds_since_last_scan'])} s "
            f"ago, latency {_known(health.latency_s)} s, max LSN {metadata['max_lsn']}."
        )
        if health.unavailable:
            description += f" Not visible to this login: {', '.join(health.unavailable)}."
    else:
        description = " ".join([*verdict.errors, *verdict.warnings])
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=CAPTURE_HEALTH,
        passed=severity is None,
        severity=severity or AssetCheckSeverity.WARN,
        description=description,
        metadata=metadata,
    )


def _unreadable(table: CapturedTable, exc: Exception) -> AssetCheckResult:
    if isinstance(exc, SourceUnreachable):
        description = (
            f"The source is unreachable, so its capture state cannot be read and nothing syncs: "
            f"{exc} The assets stay as last recorded; the sync resumes where the chain ends once "
            "the source answers."
        )
    else:
        description = f"Could not read the capture state of the source: {exc}"
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=CAPTURE_HEALTH,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=description,
        metadata={"capture_instance": table.instance.name},
    )


def read_health(source: Source) -> CaptureHealth:
    """The capture state of ``source``, in one connection."""
    conn = source.connect()
    try:
        return capture_health(conn)
    finally:
        conn.close()


def build_capture_checks(source: Source) -> AssetChecksDefinition:
    """``<source>_capture_health``: one non-blocking ``capture_health`` check per change log.

    To run it on a schedule, e.g. every five minutes::

        job = define_asset_job("shop_capture_health", selection=AssetSelection.checks(checks))
        ScheduleDefinition(job=job, cron_schedule="*/5 * * * *")
    """
    by_key = {t.change_log_key: t for t in source.tables}
    specs = [
        AssetCheckSpec(
            CAPTURE_HEALTH,
            asset=t.change_log_key,
            blocking=False,
            description="The source's CDC capture job is running and keeping up: fails (ERROR) "
            "when it is stopped or has not scanned the log for too long, warns on capture "
            f"latency above {LAG_WARN_SECONDS:g} s.",
        )
        for t in source.tables
    ]

    @multi_asset_check(
        name=f"{source.name}_capture_health",
        specs=specs,
        can_subset=True,
        description=f"On-demand health of the CDC capture job of source '{source.name}' (one "
        "set of queries for all tables).",
    )
    def capture_checks(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        tables = sorted(
            {by_key[k.asset_key] for k in context.selected_asset_check_keys},
            key=lambda t: t.change_log_key.path,
        )
        if not tables:
            return
        try:
            health = read_health(source)
        except SqlServerError as exc:
            for table in tables:
                yield _unreadable(table, exc)
            return
        source_wide = assess(health)
        for table in tables:
            yield _result(table, health, source_wide)

    return capture_checks
