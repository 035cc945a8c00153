"""The capture and cleanup jobs: what SQL Server Agent runs for CDC.

Capture (``sp_replcmds`` in SQL Server, :func:`scan_db` here) reads committed change-log rows
above its last position, at most ``maxtrans`` transactions per scan, in LSN order, and in one
SQLite transaction

- copies them into ``cdc.<ci>_CT`` of every capture instance of the table that was created
  before the transaction (only the captured columns; update masks per instance),
- writes one ``cdc.lsn_time_mapping`` row per transaction that produced change rows and, when
  it processed log past the last such transaction (other tables, DDL, a snapshot's savepoint),
  one progress row with ``tran_id = 0x00`` as SQL Server does, so ``sys.fn_cdc_get_max_lsn()``
  follows the log,
- establishes ``start_lsn`` of capture instances it has passed the creation of,
- moves DDL it has passed into ``cdc.ddl_history``,
- logs a ``sys.dm_cdc_log_scan_sessions`` row (the last 32 are kept).

Scans take SQLite's write lock, so scans from several agents (threads or processes) are atomic
and never capture a transaction twice.

Cleanup (:func:`cleanup_db`) computes the low water mark from the retention (minutes): the
largest ``start_lsn`` whose ``tran_end_time`` is at or before ``latest tran_end_time -
retention``. It first raises ``start_lsn`` of every capture instance below the mark to the mark,
then deletes change rows below it, then the ``lsn_time_mapping`` rows no instance needs.

:class:`CaptureAgent` runs both jobs in a thread, following ``msdb.dbo.cdc_jobs`` (polling
interval, maxtrans, maxscans) and the started/stopped state set by ``sp_cdc_start_job`` /
``sp_cdc_stop_job``. As in SQL Server, ``sp_cdc_change_job`` takes effect when the job (re)starts.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..catalog import bootstrap, storage
from ..catalog.sqlite_db import open_sqlite, register_stubs
from ..catalog.storage import quote
from ..values import types as T
from ..values import udfs
from . import transaction_log

log = logging.getLogger(__name__)

DEFAULT_MAXTRANS = 500
DEFAULT_MAXSCANS = 10
DEFAULT_POLLING_INTERVAL = 5
DEFAULT_RETENTION = 4320
SESSIONS_KEPT = 32


@dataclass(frozen=True)
class _Instance:
    object_id: int
    name: str
    source_object_id: int
    change_table: str
    create_lsn: int
    column_ids: tuple[int, ...]
    start_lsn: bytes | None


def _instances(db: sqlite3.Connection) -> list[_Instance]:
    rows = db.execute(
        "SELECT i.object_id, i.capture_instance, i.source_object_id, o.physical, i.create_lsn, "
        "i.column_ids, ct.start_lsn FROM _emu_instances AS i "
        'JOIN "cdc.change_tables" AS ct ON ct.object_id = i.object_id '
        "JOIN _emu_objects AS o ON o.object_id = i.object_id ORDER BY i.create_lsn"
    ).fetchall()
    return [
        _Instance(
            oid, name, source, physical, int(create_lsn), tuple(json.loads(column_ids)), start_lsn
        )
        for oid, name, source, physical, create_lsn, column_ids, start_lsn in rows
    ]


def _captured_columns(db: sqlite3.Connection, instances: list[_Instance]) -> dict[int, list[str]]:
    """Captured column names (ordinal order) of ``instances``, by change table object id."""
    ids = ", ".join(str(i.object_id) for i in instances) or "NULL"
    columns: dict[int, list[str]] = {i.object_id: [] for i in instances}
    for oid, name in db.execute(
        'SELECT object_id, column_name FROM "cdc.captured_columns" '
        f"WHERE object_id IN ({ids}) ORDER BY object_id, column_ordinal"
    ):
        columns[oid].append(name)
    return columns


def _sources_written(db: sqlite3.Connection, low: int, high: int) -> set[int] | None:
    """The tracked tables the transactions in (low, high] wrote; None if not all are on record
    (transactions committed before ``_emu_transaction_tables`` existed): then every table."""
    (unrecorded,) = db.execute(
        "SELECT COUNT(*) FROM _emu_transactions AS t WHERE t.lsn > ? AND t.lsn <= ? "
        "AND NOT EXISTS (SELECT 1 FROM _emu_transaction_tables AS w WHERE w.lsn = t.lsn)",
        (low, high),
    ).fetchone()
    if unrecorded:
        return None
    return {
        int(r[0])
        for r in db.execute(
            "SELECT DISTINCT object_id FROM _emu_transaction_tables WHERE lsn > ? AND lsn <= ?",
            (low, high),
        )
    }


def _cdc_enabled(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT value FROM _emu_meta WHERE key = 'cdc_enabled'").fetchone()
    return bool(row and int(row[0]))


def _job_setting(db: sqlite3.Connection, job_type: str, column: str) -> int | None:
    row = db.execute(
        f'SELECT {column} FROM "msdb.dbo.cdc_jobs" WHERE job_type = ?', (job_type,)
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _log_columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({quote(table)})")}


def scan_db(db: sqlite3.Connection, max_transactions: int | None = None) -> int:
    """One capture scan on ``db`` (which must not be inside a transaction).

    Returns the number of transactions captured.
    """
    started = storage.now()
    db.execute("BEGIN IMMEDIATE")
    try:
        if not _cdc_enabled(db):
            db.execute("COMMIT")
            return 0
        maxtrans = max_transactions or _job_setting(db, "capture", "maxtrans") or DEFAULT_MAXTRANS
        captured, last = db.execute("SELECT captured_lsn, last_lsn FROM _emu_state").fetchone()
        transactions = db.execute(
            "SELECT lsn, tran_id, begin_time, end_time, begin_lsn FROM _emu_transactions "
            "WHERE lsn > ? ORDER BY lsn LIMIT ?",
            (captured, maxtrans),
        ).fetchall()
        horizon = transactions[-1][0] if len(transactions) >= maxtrans else last
        instances = _instances(db)
        with_rows: set[int] = set()
        commands = 0
        records = 0
        written = _sources_written(db, captured, horizon)
        by_source: dict[int, list[_Instance]] = {}
        for instance in instances:
            if written is None or instance.source_object_id in written:
                by_source.setdefault(instance.source_object_id, []).append(instance)
        captured_columns = _captured_columns(db, [i for g in by_source.values() for i in g])
        for source, group in by_source.items():
            log_name = transaction_log.log_table(source)
            present = _log_columns(db, log_name)
            if not present:
                continue
            quoted = quote(log_name)
            (count,) = db.execute(
                f"SELECT COUNT(*) FROM {quoted} WHERE lsn > ? AND lsn <= ?", (captured, horizon)
            ).fetchone()
            records += count
            for instance in group:
                low = max(captured, instance.create_lsn)
                if low >= horizon:
                    continue
                values = ", ".join(
                    f"c{cid}" if f"c{cid}" in present else "NULL" for cid in instance.column_ids
                )
                columns = captured_columns[instance.object_id]
                names = ", ".join(quote(c) for c in columns)
                full = udfs.full_mask(len(columns))
                ids = ",".join(str(c) for c in instance.column_ids)
                cursor = db.execute(
                    f"INSERT INTO {quote(instance.change_table)} "
                    '("__$start_lsn", "__$end_lsn", "__$seqval", "__$operation", "__$update_mask"'
                    f'{", " + names if names else ""}, "__$command_id") '
                    "SELECT _emu_lsn(lsn), NULL, _emu_lsn(seq), op, "
                    "CASE WHEN op >= 3 THEN _emu_mask(changed, ?) ELSE ? END"
                    f"{', ' + values if values else ''}, cmd "
                    f"FROM {quoted} WHERE lsn > ? AND lsn <= ? ORDER BY lsn, cmd, seq, op",
                    (ids, full, low, horizon),
                )
                commands += max(cursor.rowcount, 0)
                with_rows.update(
                    r[0]
                    for r in db.execute(
                        f"SELECT DISTINCT lsn FROM {quoted} WHERE lsn > ? AND lsn <= ?",
                        (low, horizon),
                    )
                )
            db.execute(f"DELETE FROM {quoted} WHERE lsn <= ?", (horizon,))
        mapped = [t for t in transactions if t[0] <= horizon and t[0] in with_rows]
        db.executemany(
            'INSERT INTO "cdc.lsn_time_mapping" (start_lsn, tran_begin_time, tran_end_time, '
            "tran_id, tran_begin_lsn) VALUES (?, ?, ?, ?, ?)",
            [
                (
                    udfs.lsn_bytes(lsn),
                    begin,
                    end,
                    int(tran_id).to_bytes(10, "big"),
                    udfs.lsn_bytes(begin_lsn),
                )
                for lsn, tran_id, begin, end, begin_lsn in mapped
            ],
        )
        db.execute("DELETE FROM _emu_transactions WHERE lsn <= ?", (horizon,))
        db.execute("DELETE FROM _emu_transaction_tables WHERE lsn <= ?", (horizon,))
        _mark_progress(db, horizon, started)
        schema_changes = _capture_ddl(db, instances, captured, horizon)
        for instance in instances:
            if instance.start_lsn is None and instance.create_lsn <= horizon:
                db.execute(
                    'UPDATE "cdc.change_tables" SET start_lsn = ? WHERE object_id = ? '
                    "AND start_lsn IS NULL",
                    (udfs.lsn_bytes(instance.create_lsn), instance.object_id),
                )
        db.execute("UPDATE _emu_state SET captured_lsn = ?", (horizon,))
        _log_session(
            db, started, transactions, captured, horizon, records, commands, schema_changes
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return len(transactions)


def _mark_progress(db: sqlite3.Connection, horizon: int, when: dt.datetime) -> None:
    """Advance the high water mark over log that held no captured change.

    SQL Server's capture job writes such rows with ``tran_id = 0x00`` when it has processed log
    past the last captured transaction (other tables, DDL, savepoints, ...), so
    ``sys.fn_cdc_get_max_lsn()`` keeps up with the log even when tracked tables are quiet.
    """
    if not db.execute('SELECT 1 FROM "cdc.change_tables" LIMIT 1').fetchone():
        return
    (mapped,) = db.execute('SELECT MAX(start_lsn) FROM "cdc.lsn_time_mapping"').fetchone()
    if mapped is not None and udfs.lsn_int(mapped) >= horizon:
        return
    stamp = T.DATETIME.encode(when)
    db.execute(
        'INSERT INTO "cdc.lsn_time_mapping" (start_lsn, tran_begin_time, tran_end_time, '
        "tran_id, tran_begin_lsn) VALUES (?, ?, ?, ?, NULL)",
        (udfs.lsn_bytes(horizon), stamp, stamp, bytes(10)),
    )


def _capture_ddl(
    db: sqlite3.Connection, instances: list[_Instance], captured: int, horizon: int
) -> int:
    rows = db.execute(
        "SELECT id, lsn, source_object_id, ddl_command, ddl_time, required_column_update "
        "FROM _emu_ddl_log WHERE lsn IS NOT NULL AND lsn <= ? ORDER BY lsn, id",
        (horizon,),
    ).fetchall()
    for _id, lsn, source, command, ddl_time, required in rows:
        for instance in instances:
            if instance.source_object_id == source and instance.create_lsn < lsn:
                db.execute(
                    'INSERT INTO "cdc.ddl_history" (source_object_id, object_id, '
                    "required_column_update, ddl_command, ddl_lsn, ddl_time) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (source, instance.object_id, required, command, udfs.lsn_bytes(lsn), ddl_time),
                )
    if rows:
        db.execute("DELETE FROM _emu_ddl_log WHERE lsn IS NOT NULL AND lsn <= ?", (horizon,))
    return len(rows)


def _log_session(
    db: sqlite3.Connection,
    started: dt.datetime,
    transactions: list[tuple[int, int, str, str, int]],
    captured: int,
    horizon: int,
    records: int,
    commands: int,
    schema_changes: int,
) -> None:
    ended = storage.now()
    if not transactions:
        # consecutive empty scans share one session row, counted in empty_scan_count
        updated = db.execute(
            'UPDATE "sys.dm_cdc_log_scan_sessions" SET end_time = ?, '
            "empty_scan_count = empty_scan_count + 1 WHERE session_id = "
            '(SELECT MAX(session_id) FROM "sys.dm_cdc_log_scan_sessions") AND tran_count = 0',
            (T.DATETIME.encode(ended),),
        ).rowcount
        if updated:
            return
    (session_id,) = db.execute(
        "UPDATE _emu_state SET next_session_id = next_session_id + 1 RETURNING next_session_id - 1"
    ).fetchone()
    last_commit_time = transactions[-1][3] if transactions else None
    latency = 0
    if last_commit_time is not None:
        committed = dt.datetime.fromisoformat(last_commit_time[:26])
        latency = max(0, int((ended - committed).total_seconds()))
    first_lsn = transactions[0][0] if transactions else None
    last_lsn = transactions[-1][0] if transactions else None
    db.execute(
        'INSERT INTO "sys.dm_cdc_log_scan_sessions" (session_id, start_time, end_time, duration, '
        "scan_phase, error_count, start_lsn, current_lsn, end_lsn, tran_count, last_commit_lsn, "
        "last_commit_time, log_record_count, schema_change_count, command_count, "
        "first_begin_cdc_lsn, last_commit_cdc_lsn, last_commit_cdc_time, latency, "
        "empty_scan_count, failed_sessions_count) "
        "VALUES (?, ?, ?, ?, 'Done', 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
        (
            session_id,
            T.DATETIME.encode(started),
            T.DATETIME.encode(ended),
            int((ended - started).total_seconds()),
            udfs.lsn_parts_text(first_lsn if first_lsn is not None else captured),
            udfs.lsn_parts_text(horizon),
            udfs.lsn_parts_text(horizon),
            len(transactions),
            udfs.lsn_parts_text(last_lsn),
            last_commit_time,
            records,
            schema_changes,
            commands,
            udfs.lsn_parts_text(first_lsn),
            udfs.lsn_parts_text(last_lsn),
            last_commit_time,
            latency,
            0 if transactions else 1,
        ),
    )
    db.execute(
        'DELETE FROM "sys.dm_cdc_log_scan_sessions" WHERE session_id <= ?',
        (session_id - SESSIONS_KEPT,),
    )


def cleanup_instance(
    db: sqlite3.Connection, object_id: int, change_table: str, low_water_mark: bytes
) -> int:
    """Raise one instance's start_lsn to ``low_water_mark`` and delete change rows below it."""
    row = db.execute(
        'SELECT start_lsn FROM "cdc.change_tables" WHERE object_id = ?', (object_id,)
    ).fetchone()
    if row is None or (row[0] is not None and bytes(row[0]) >= low_water_mark):
        return 0
    db.execute(
        'UPDATE "cdc.change_tables" SET start_lsn = ? WHERE object_id = ?',
        (low_water_mark, object_id),
    )
    deleted = db.execute(
        f'DELETE FROM {quote(change_table)} WHERE "__$start_lsn" < ?', (low_water_mark,)
    ).rowcount
    return max(deleted, 0)


def trim_mapping(db: sqlite3.Connection) -> None:
    """Delete ``lsn_time_mapping`` rows below every instance's start_lsn."""
    (lowest,) = db.execute('SELECT MIN(start_lsn) FROM "cdc.change_tables"').fetchone()
    (instances,) = db.execute('SELECT COUNT(*) FROM "cdc.change_tables"').fetchone()
    if instances and lowest is not None:
        db.execute('DELETE FROM "cdc.lsn_time_mapping" WHERE start_lsn < ?', (lowest,))


def cleanup_db(
    db: sqlite3.Connection,
    retention_minutes: int | None = None,
    now: dt.datetime | None = None,
) -> int:
    """One cleanup pass on ``db`` (not inside a transaction); returns change rows deleted."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if not _cdc_enabled(db):
            db.execute("COMMIT")
            return 0
        retention = retention_minutes
        if retention is None:
            retention = _job_setting(db, "cleanup", "retention") or DEFAULT_RETENTION
        if now is not None:
            reference: dt.datetime | None = now
        else:
            (latest,) = db.execute(
                'SELECT MAX(tran_end_time) FROM "cdc.lsn_time_mapping"'
            ).fetchone()
            reference = T.convert_stored(T.DATETIME, latest)
        if reference is None:
            db.execute("COMMIT")
            return 0
        cutoff = T.DATETIME.encode(reference - dt.timedelta(minutes=retention))
        (mark,) = db.execute(
            'SELECT MAX(start_lsn) FROM "cdc.lsn_time_mapping" WHERE tran_end_time <= ?', (cutoff,)
        ).fetchone()
        deleted = 0
        if mark is not None:
            for instance in _instances(db):
                deleted += cleanup_instance(
                    db, instance.object_id, instance.change_table, bytes(mark)
                )
            trim_mapping(db)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return deleted


# -- module-level API and the agent ------------------------------------------------------------


def open_db(path: str | Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A connection for the capture and cleanup jobs (what :class:`CaptureAgent` keeps open)."""
    db = open_sqlite(str(path), timeout)
    register_stubs(db)
    bootstrap.bootstrap(db)
    return db


def scan(path: str | Path, max_transactions: int | None = None) -> int:
    """One capture scan of the database at ``path``; returns the transactions captured."""
    db = open_db(path)
    try:
        return scan_db(db, max_transactions)
    finally:
        db.close()


def cleanup(
    path: str | Path, retention_minutes: int | None = None, now: dt.datetime | None = None
) -> int:
    """One cleanup pass of the database at ``path``; returns the change rows deleted."""
    db = open_db(path)
    try:
        return cleanup_db(db, retention_minutes, now)
    finally:
        db.close()


@dataclass
class _JobConfig:
    maxtrans: int = DEFAULT_MAXTRANS
    maxscans: int = DEFAULT_MAXSCANS
    pollinginterval: float = DEFAULT_POLLING_INTERVAL
    start_count: int = -1


class CaptureAgent:
    """SQL Server Agent for one database: the capture job and the cleanup job in a thread.

    ``start()`` / ``stop()`` control the thread; whether the *jobs* run is the database's state
    (``sp_cdc_start_job`` / ``sp_cdc_stop_job``), so an agent in another process obeys them too.
    ``cleanup_interval`` (seconds) replaces SQL Server's daily 2 AM schedule.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        cleanup_interval: float = 3600.0,
        timeout: float = 30.0,
        check_interval: float = 0.1,
    ) -> None:
        self.path = str(path)
        self.cleanup_interval = cleanup_interval
        self.timeout = timeout
        self.check_interval = check_interval
        self.scans = 0
        self.captured = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CaptureAgent:
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"cdc-agent:{self.path}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> CaptureAgent:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _job_state(self, db: sqlite3.Connection, job_type: str) -> tuple[bool, int]:
        row = db.execute(
            "SELECT running, start_count FROM _emu_jobs WHERE job_type = ?", (job_type,)
        ).fetchone()
        if row is None:
            return False, -1
        return bool(row[0]), int(row[1])

    def _read_config(self, db: sqlite3.Connection, start_count: int) -> _JobConfig:
        row = db.execute(
            'SELECT maxtrans, maxscans, pollinginterval FROM "msdb.dbo.cdc_jobs" '
            "WHERE job_type = 'capture'"
        ).fetchone()
        if row is None:
            return _JobConfig(start_count=start_count)
        maxtrans, maxscans, polling = row
        return _JobConfig(
            maxtrans=int(maxtrans or DEFAULT_MAXTRANS),
            maxscans=int(maxscans or DEFAULT_MAXSCANS),
            pollinginterval=float(polling if polling is not None else DEFAULT_POLLING_INTERVAL),
            start_count=start_count,
        )

    def _run(self) -> None:
        db = open_db(self.path, self.timeout)
        config = _JobConfig()
        last_cleanup = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    running, start_count = self._job_state(db, "capture")
                    if not running:
                        self._stop.wait(self.check_interval)
                        continue
                    if start_count != config.start_count:
                        config = self._read_config(db, start_count)
                    for _ in range(max(1, config.maxscans)):
                        captured = scan_db(db, config.maxtrans)
                        self.scans += 1
                        self.captured += captured
                        if captured < config.maxtrans or self._stop.is_set():
                            break
                    cleanup_running, _ = self._job_state(db, "cleanup")
                    if cleanup_running and time.monotonic() - last_cleanup >= self.cleanup_interval:
                        cleanup_db(db)
                        last_cleanup = time.monotonic()
                except Exception as exc:  # keep the agent alive, like SQL Server Agent retries
                    log.warning("CDC capture agent for %s: %s", self.path, exc)
                    self.errors.append(exc)
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                deadline = time.monotonic() + config.pollinginterval
                while not self._stop.is_set() and time.monotonic() < deadline:
                    running, start_count = self._job_state(db, "capture")
                    if not running or start_count != config.start_count:
                        break
                    self._stop.wait(min(self.check_interval, max(0.0, deadline - time.monotonic())))
        finally:
            db.close()
