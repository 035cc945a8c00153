"""What the ``cdc-assets emulator`` commands share: an emulator database checked and opened, its
max LSN and how far capture lags (every T-SQL statement through a function of
:mod:`cdc_assets.sqlserver`, imported lazily), and a status line rewritten in place.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .usage import PROG, UsageError

if TYPE_CHECKING:
    from cdc_assets.emulator import Connection
    from cdc_assets.lsn import Lsn
    from cdc_assets.workload import WorkloadStats


def require_emulator_db(path: Path) -> None:
    """Refuse anything but an existing emulator database, without modifying the file."""
    if not path.exists():
        raise UsageError(f"{path}: no such file (create it with '{PROG} emulator create {path}')")
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    from cdc_assets.emulator import is_emulator_database

    if not is_emulator_database(path):
        raise UsageError(f"{path}: not a cdc_assets emulator database")


def open_emulator(path: Path) -> Connection:
    from cdc_assets import emulator

    return emulator.connect(path, autocommit=True)


def read_max_lsn(conn: Connection) -> Lsn | None:
    from cdc_assets.sqlserver import find_max_lsn

    return find_max_lsn(conn)


def lsn_text(value: Lsn | None) -> str:
    return "-" if value is None else value.hex


def cdc_enabled(conn: Connection) -> bool:
    from cdc_assets.sqlserver import database_info

    return database_info(conn).cdc_enabled


def is_captured(conn: Connection, max_lsn: Lsn | None) -> bool:
    """This connection's last commit is at or below ``max_lsn`` (captured)."""
    own = getattr(conn, "last_commit_lsn", None)
    return not isinstance(own, bytes) or (max_lsn is not None and own <= max_lsn.raw)


def capture_lag(conn: Connection, stats: WorkloadStats, max_lsn: Lsn | None) -> float | None:
    """Seconds between the workload's last commit and the commit time of the max LSN."""
    from cdc_assets.sqlserver import map_lsn_to_time

    last = stats.last_commit_at
    if last is None or max_lsn is None:
        return None
    if isinstance(getattr(conn, "last_commit_lsn", None), bytes) and is_captured(conn, max_lsn):
        return 0.0
    captured = map_lsn_to_time(conn, max_lsn)
    if not isinstance(captured, dt.datetime):
        return None
    return max(0.0, (last - captured).total_seconds())


class StatusLine:
    """One status line, rewritten in place on a terminal; plain lines elsewhere."""

    def __init__(self, stream: IO[str], interval_tty: float, interval_plain: float) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval = interval_tty if self.tty else interval_plain
        self._last = 0.0
        self._shown = False

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def show(self, text: str) -> None:
        self._last = time.monotonic()
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


def wait_for_capture(conn: Connection, timeout: float) -> Lsn | None:
    """Wait (up to ``timeout`` s) until the max LSN reaches this connection's last commit."""
    deadline = time.monotonic() + timeout
    while True:
        max_lsn = read_max_lsn(conn)
        if is_captured(conn, max_lsn):
            return max_lsn
        if time.monotonic() >= deadline:
            return max_lsn
        time.sleep(0.05)


def table_missing(conn: Connection, schema: str, name: str) -> bool:
    from cdc_assets.sqlserver import table_exists

    return not table_exists(conn, schema, name)
