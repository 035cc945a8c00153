"""Opening the SQLite file an emulated database lives in."""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from .. import errors
from ..values import offset_functions, udfs
from ..values.sqlite_values import register_converters


def open_sqlite(path: str, timeout: float) -> sqlite3.Connection:
    """A SQLite connection configured for the emulator (WAL, converters, pure functions)."""
    register_converters()
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
    offset_functions.register(db)
    return db


# SQLite parses a database's whole schema on a connection's first statement: with a thousand
# captured tables (their change tables, triggers and indexes: ~10,000 schema objects) that is
# ~0.4 s per connection. Closed sessions leave their SQLite connection here for the next one
# of this process (rolled back, its lock wait reset); a forked process starts with none. The
# pool holds at most POOL_SIZE connections over all files (the least recently returned go
# first: each holds three file descriptors), and a connection to a file that was since
# deleted or replaced (``emulator create --force``) is closed, not reused.
POOL_SIZE = 8
_Idle = tuple[tuple[str, float], tuple[int, int], sqlite3.Connection]
_pool: list[_Idle] = []  # oldest first
_pool_pid = os.getpid()
_pool_lock = threading.Lock()


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def take_sqlite(path: str, timeout: float) -> sqlite3.Connection:
    """An idle pooled connection to ``path``, else a new one (:func:`open_sqlite`)."""
    global _pool_pid
    file_id = _file_id(path)
    with _pool_lock:
        if _pool_pid != os.getpid():  # inherited from the parent process: not ours to use
            _pool.clear()
            _pool_pid = os.getpid()
        gone = [e for e in _pool if e[0][0] == path and e[1] != file_id]  # file replaced
        fits = [e for e in _pool if e[0] == (path, timeout) and e[1] == file_id]
        taken = fits[-1] if fits else None  # the most recently returned
        _pool[:] = [e for e in _pool if e is not taken and all(e is not g for g in gone)]
    for _, _, stale in gone:
        stale.close()
    if taken is None:
        return open_sqlite(path, timeout)
    db = taken[2]
    db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    return db


def give_sqlite(path: str, timeout: float, db: sqlite3.Connection) -> None:
    """``db`` back to the pool with no transaction open (the pool's oldest closed when full)."""
    evicted: list[sqlite3.Connection] = []
    pooled = False
    try:
        if db.in_transaction:
            db.execute("ROLLBACK")
        file_id = _file_id(path)
        with _pool_lock:
            if _pool_pid == os.getpid() and file_id is not None:
                _pool.append(((path, timeout), file_id, db))
                while len(_pool) > POOL_SIZE:
                    evicted.append(_pool.pop(0)[2])
                pooled = True
    except sqlite3.Error:
        pass  # a connection in a state of its own: closed, not reused
    for conn in evicted if pooled else [*evicted, db]:
        conn.close()


def _stub(*_args: Any) -> Any:
    raise errors.not_supported("writing to a tracked table outside an emulator session")


def register_stubs(db: sqlite3.Connection) -> None:
    """Functions the triggers call; on non-session connections writing a tracked table fails."""
    db.create_function("_emu_cmd", 0, _stub)
    db.create_function("_emu_seq", 0, _stub)
