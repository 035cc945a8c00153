"""The state of a session's open T-SQL transaction and its isolation levels (see :mod:`.session`
for the semantics)."""

from __future__ import annotations

import datetime as dt
import itertools
import uuid
from dataclasses import dataclass, field

BUSY_SNAPSHOT = 517
READ_COMMITTED = "READ COMMITTED"
SNAPSHOT = "SNAPSHOT"
# REPEATABLE READ and SERIALIZABLE: the transaction takes the database's write lock at its first
# statement and holds it to its end, so nothing it read changes and nothing appears in a range it
# read until it ends (SQL Server locks only the rows and key ranges read; here every other writer
# waits, readers do not). READ UNCOMMITTED reads committed data (a stronger guarantee).
LOCKING_LEVELS = ("REPEATABLE READ", "SERIALIZABLE")

# the transaction ids of sys.dm_tran_* (a statement outside a transaction gets one too)
TRAN_IDS = itertools.count(1_000_000 + (uuid.uuid4().int % 1_000_000) * 1000)


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
