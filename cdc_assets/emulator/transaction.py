"""The state of a session's open T-SQL transaction (see :mod:`.session` for the semantics)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field


@dataclass
class Transaction:
    """The state of the open T-SQL transaction of a session."""

    level: str
    tran_id: int
    begin_time: dt.datetime
    trancount: int = 1
    implicit: bool = False
    name: str | None = None
    sqlite_mode: str | None = None  # None: no SQLite transaction yet, "read" (snapshot), "write"
    seq_base: int | None = None
    seq_count: int = 0
    cmd: int = 0
    touched: set[int] = field(default_factory=set)
    ddl_logged: bool = False
    wrote: bool = False
    first_write_time: dt.datetime | None = None
    savepoints: list[str] = field(default_factory=list)
    sqlite_savepoints: set[str] = field(default_factory=set)
    begin_lsn: int | None = None
    savepoint_lsn: int | None = None
    snapshot_checked: bool = False
