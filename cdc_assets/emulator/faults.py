"""Injected network faults: the emulator's stand-in for a server that goes away.

A real SQL Server can be unreachable when a connection opens (pyodbc: SQLSTATE ``08001``, e.g.
TCP error 10061) or drop an open connection in the middle of a result (SQLSTATE ``08S01``,
*Communication link failure*, e.g. 10054). Tests inject both here to prove a run fails cleanly
and its retry succeeds.

The plan is a JSON file next to the database, ``<db>.faults``, so every process that opens the
database sees it — Spark's Python workers included. A connection reads it when it opens (one
``stat`` when there is none). Each fault fires ``times`` times in total, counted under a file lock
across processes, and then stops firing, like a network that comes back.

Kinds:

* ``unreachable``: :func:`~.dbapi.connect` raises ``08001`` (10061).
* ``dropped``: a result whose statement contains ``match`` raises ``08S01`` (10054) when the row
  after the first ``after_rows`` is fetched; the connection is closed with it.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import DRIVER, OperationalError

__all__ = ["Fault", "clear", "inject", "plan_for", "remaining"]

FaultKind = Literal["unreachable", "dropped"]


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    times: int = 1
    after_rows: int = 0
    match: str = ""


def _plan_path(db_path: str | Path) -> Path:
    return Path(f"{db_path}.faults")


def inject(db_path: str | Path, fault: Fault) -> None:
    """Add ``fault`` to the plan of the database at ``db_path``."""
    with _locked_plan(db_path) as faults:
        faults.append(asdict(fault))


def clear(db_path: str | Path) -> None:
    """Remove every injected fault."""
    _plan_path(db_path).unlink(missing_ok=True)


def remaining(db_path: str | Path) -> list[Fault]:
    """The faults that have not fired all their times yet."""
    path = _plan_path(db_path)
    if not path.exists():
        return []
    return [Fault(**f) for f in json.loads(path.read_text() or "[]") if f["times"] > 0]


def plan_for(db_path: str | Path) -> list[Fault] | None:
    """The faults a new connection must honour, or None (the normal case: no plan file)."""
    if not _plan_path(db_path).exists():
        return None
    return remaining(db_path) or None


@contextmanager
def _locked_plan(db_path: str | Path) -> Iterator[list[dict[str, Any]]]:
    """The plan's entries under an exclusive lock; changes are written back on exit."""
    fd = os.open(_plan_path(db_path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        text = os.pread(fd, 1 << 20, 0).decode()
        entries: list[dict[str, Any]] = json.loads(text) if text else []
        yield entries
        data = json.dumps(entries).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)  # releases the lock


def claim(db_path: str | Path, fault: Fault) -> bool:
    """Count one firing of ``fault``; False when it has already fired all its times."""
    with _locked_plan(db_path) as faults:
        for entry in faults:
            same = Fault(**entry) == Fault(**{**asdict(fault), "times": entry["times"]})
            if same and entry["times"] > 0:
                entry["times"] -= 1
                return True
        return False


def unreachable_error() -> OperationalError:
    text = (
        "TCP Provider: No connection could be made because the target machine actively refused "
        "it. (10061)"
    )
    return OperationalError("08001", f"[08001] {DRIVER}{text} (SQLDriverConnect)", 10061)


def dropped_error() -> OperationalError:
    text = "TCP Provider: An existing connection was forcibly closed by the remote host. (10054)"
    return OperationalError("08S01", f"[08S01] {DRIVER}{text} (SQLFetch)", 10054)


def check_connect(db_path: str | Path, faults: list[Fault] | None) -> None:
    """Raise the ``unreachable`` fault if one is armed."""
    for fault in faults or ():
        if fault.kind == "unreachable" and claim(db_path, fault):
            raise unreachable_error()


def dropping(fault: Fault, sql: str) -> bool:
    return fault.kind == "dropped" and fault.match in sql


class _ClosedRows:
    """What is left of a result once its connection dropped: every fetch fails again."""

    def fetchone(self) -> None:
        raise dropped_error()

    def fetchmany(self, size: int) -> list[Any]:
        raise dropped_error()

    def close(self) -> None:
        return None


class DroppingRows:
    """Rows of a result that fail like a dropped connection after ``fault.after_rows`` rows."""

    def __init__(self, rows: Any, fault: Fault, db_path: str, on_drop: Callable[[], None]) -> None:
        self._rows = rows
        self._fault = fault
        self._db_path = db_path
        self._on_drop = on_drop
        self._left: int | None = fault.after_rows  # None: the fault no longer fires

    def _allow(self, wanted: int) -> int:
        """How many of ``wanted`` rows to hand out; raises when the connection drops now."""
        if self._left is None or wanted <= self._left:
            if self._left is not None:
                self._left -= wanted
            return wanted
        if self._left > 0:  # hand out the rows before the drop; the next fetch fails
            allowed, self._left = self._left, 0
            return allowed
        if claim(self._db_path, self._fault):
            getattr(self._rows, "close", lambda: None)()
            self._rows = _ClosedRows()
            self._on_drop()
            raise dropped_error()
        self._left = None  # it has fired all its times: the network is back
        return wanted

    def fetchone(self) -> Sequence[Any] | None:
        self._allow(1)
        row: Sequence[Any] | None = self._rows.fetchone()
        return row

    def fetchmany(self, size: int) -> list[Sequence[Any]]:
        return list(self._rows.fetchmany(self._allow(size)))

    def fetchall(self) -> list[Sequence[Any]]:
        rows: list[Sequence[Any]] = []
        while batch := self.fetchmany(1000):
            rows.extend(batch)
        return rows

    def __iter__(self) -> Iterator[Sequence[Any]]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        getattr(self._rows, "close", lambda: None)()
