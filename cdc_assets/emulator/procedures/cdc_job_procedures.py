"""The CDC procedures that drive the agent's jobs: ``sys.sp_cdc_start_job`` /
``sp_cdc_stop_job`` / ``sp_cdc_change_job``, ``sp_cdc_scan`` (capture scans in the caller,
``@maxtrans``, ``@maxscans``) and ``sp_cdc_cleanup_change_table`` (move one instance's low water
mark up and delete below it).
"""

from __future__ import annotations

from typing import Any

from .. import errors
from ..catalog import storage
from ..cdc import capture
from ..translate.plan import StatementContext
from ..values import types as T
from .cdc_procedures import named_capture_instance
from .procedures import PROCEDURES, Procedure, argument, int_argument


def _job_type(args: dict[str, Any]) -> str:
    job = str(argument(args, "job_type", "capture") or "capture").lower()
    if job not in ("capture", "cleanup"):
        raise errors.cdc_error(
            22992,
            f"The specified @job_type, '{job}', is not a valid value. Specify 'capture' or "
            "'cleanup'.",
        )
    return job


def _require_job(session: StatementContext, job: str) -> None:
    row = session.db.execute("SELECT 1 FROM _emu_jobs WHERE job_type = ?", (job,)).fetchone()
    if row is None:
        raise errors.cdc_error(
            22997,
            f"The Change Data Capture '{job}' job does not exist in the system table "
            "'msdb.dbo.cdc_jobs'. Use the stored procedure 'sys.sp_cdc_add_job' to add the Change "
            "Data Capture job.",
        )


def _start_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    with session.write_scope():
        _require_job(session, job)
        session.db.execute(
            "UPDATE _emu_jobs SET running = 1, start_count = start_count + 1, start_time = ?, "
            "stop_time = NULL WHERE job_type = ?",
            (T.DATETIME.encode(storage.now()), job),
        )
    return None


def _stop_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    with session.write_scope():
        _require_job(session, job)
        session.db.execute(
            "UPDATE _emu_jobs SET running = 0, stop_time = ? WHERE job_type = ? AND running = 1",
            (T.DATETIME.encode(storage.now()), job),
        )
    return None


def _change_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    updates: dict[str, int] = {}
    for key in ("maxtrans", "maxscans", "continuous", "pollinginterval", "retention", "threshold"):
        value = int_argument(argument(args, key))
        if value is not None:
            if value < 0 or (key == "retention" and value > 52_494_800):
                raise errors.cdc_error(
                    22999, f"The value specified for the parameter @{key} is not valid."
                )
            updates[key] = value
    with session.write_scope():
        _require_job(session, job)
        for key, value in updates.items():
            session.db.execute(
                f'UPDATE "msdb.dbo.cdc_jobs" SET {key} = ? WHERE job_type = ?', (value, job)
            )
    return None


def _scan(session: StatementContext, args: dict[str, Any]) -> None:
    tx = session.tx
    if tx is not None and (tx.sqlite_mode is not None or not tx.implicit):
        raise errors.cdc_error(
            22924, "sp_cdc_scan cannot be run inside a user transaction; commit or roll back first."
        )
    if tx is not None:
        session.tx = None  # an empty implicit transaction
    maxtrans = int_argument(argument(args, "maxtrans"))
    maxscans = int_argument(argument(args, "maxscans")) or 1
    for _ in range(max(1, maxscans)):
        captured = capture.scan_db(session.db, maxtrans)
        if captured < (maxtrans or capture.DEFAULT_MAXTRANS):
            break
    return None


def _cleanup_change_table(session: StatementContext, args: dict[str, Any]) -> None:
    ci = str(argument(args, "capture_instance"))
    mark = argument(args, "low_water_mark")
    with session.write_scope():
        db = session.db
        _, instance = named_capture_instance(session, args)
        if mark is None:
            return None
        mark = bytes(mark)
        (maximum,) = db.execute('SELECT MAX(start_lsn) FROM "cdc.lsn_time_mapping"').fetchone()
        if maximum is None or mark > bytes(maximum):
            raise errors.cdc_error(
                22957,
                f"LSN {mark.hex()}, specified as the new low endpoint for the change table "
                f"associated with capture instance '{ci}', is not within the Change Data Capture "
                "database retention period.",
            )
        capture.cleanup_instance(db, instance.object_id, instance.change_table, mark)
        capture.trim_mapping(db)
    return None


PROCEDURES.update(
    {
        p.name.lower(): p
        for p in (
            Procedure("sp_cdc_start_job", ("job_type",), (), _start_job),
            Procedure("sp_cdc_stop_job", ("job_type",), (), _stop_job),
            Procedure(
                "sp_cdc_change_job",
                (
                    "job_type",
                    "maxtrans",
                    "maxscans",
                    "continuous",
                    "pollinginterval",
                    "retention",
                    "threshold",
                ),
                (),
                _change_job,
            ),
            Procedure(
                "sp_cdc_scan", ("maxtrans", "maxscans", "continuous", "pollinginterval"), (), _scan
            ),
            Procedure(
                "sp_cdc_cleanup_change_table",
                ("capture_instance", "low_water_mark", "threshold", "fcleanupfailed"),
                ("capture_instance", "low_water_mark"),
                _cleanup_change_table,
            ),
        )
    }
)
