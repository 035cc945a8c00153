"""Opening the SQLite file an emulated database lives in."""

from __future__ import annotations

import sqlite3
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


def _stub(*_args: Any) -> Any:
    raise errors.not_supported("writing to a tracked table outside an emulator session")


def register_stubs(db: sqlite3.Connection) -> None:
    """Functions the triggers call; on non-session connections writing a tracked table fails."""
    db.create_function("_emu_cmd", 0, _stub)
    db.create_function("_emu_seq", 0, _stub)
