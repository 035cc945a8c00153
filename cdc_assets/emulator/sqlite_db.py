"""Opening the SQLite file an emulated database lives in."""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from . import errors, udfs
from . import types as T


def open_sqlite(path: str, timeout: float) -> sqlite3.Connection:
    """A SQLite connection configured for the emulator (WAL, converters, pure functions)."""
    T.register_converters()
    db = sqlite3.connect(
        path,
        timeout=timeout,
        isolation_level=None,
        detect_types=sqlite3.PARSE_DECLTYPES | sqlite3.PARSE_COLNAMES,
        check_same_thread=False,
        cached_statements=512,
    )
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    udfs.register_pure(db)
    return db


# SQLite parses a database's whole schema on a connection's first statement: with a thousand
# captured tables (their change tables, triggers and indexes: ~10,000 schema objects) that is
# ~0.4 s per connection. Closed sessions leave their SQLite connection here for the next one
# of this process (rolled back, its lock wait reset); a forked process starts with none.
POOL_SIZE = 8
_pool: dict[tuple[str, float], list[sqlite3.Connection]] = {}
_pool_pid = os.getpid()
_pool_lock = threading.Lock()


def take_sqlite(path: str, timeout: float) -> sqlite3.Connection:
    """An idle pooled connection to ``path``, else a new one (:func:`open_sqlite`)."""
    global _pool_pid
    with _pool_lock:
        if _pool_pid != os.getpid():  # inherited from the parent process: not ours to use
            _pool.clear()
            _pool_pid = os.getpid()
        idle = _pool.get((path, timeout))
        db = idle.pop() if idle else None
    if db is None:
        return open_sqlite(path, timeout)
    db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return db


def give_sqlite(path: str, timeout: float, db: sqlite3.Connection) -> None:
    """``db`` back to the pool with no transaction open (closed when the pool is full)."""
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
        with _pool_lock:
            idle = _pool.setdefault((path, timeout), [])
            if _pool_pid == os.getpid() and len(idle) < POOL_SIZE:
                idle.append(db)
                return
    except sqlite3.Error:
        pass  # a connection in a state of its own: closed, not reused
    db.close()


def _stub(*_args: Any) -> Any:
    raise errors.not_supported("writing to a tracked table outside an emulator session")


def register_stubs(db: sqlite3.Connection) -> None:
    """Functions the triggers call; on non-session connections writing a tracked table fails."""
    db.create_function("_emu_cmd", 0, _stub)
    db.create_function("_emu_seq", 0, _stub)
