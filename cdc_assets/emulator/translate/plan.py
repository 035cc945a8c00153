"""What translating a statement yields and what running it returns.

A :class:`Plan` is made once per statement text and catalog (and cached); a :class:`Result` per
execution. Action plans (DDL, procedures) carry a payload run against the executing session,
seen through :class:`StatementContext`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from ..catalog.catalog import Catalog, EmulatedTable
from ..transactions.transaction import Transaction
from ..values.types import SqlType


@dataclass(frozen=True)
class Slot:
    """One ``?`` of the SQLite text: the caller's parameter it binds and its encoder."""

    param: int
    encoder: Callable[[Any], Any] | None


@dataclass(frozen=True)
class ResultColumn:
    name: str
    type: SqlType | None
    python_type: type

    def description(self) -> tuple[Any, ...]:
        t = self.type
        size = t.max_length if t is not None else None
        precision = t.sys_precision if t is not None else None
        scale = t.sys_scale if t is not None else None
        return (self.name, self.python_type, None, size, precision, scale, True)


@dataclass(frozen=True)
class Plan:
    """A translated statement.

    kind: ``query`` (rows), ``dml`` (rowcount), ``action`` (DDL, procedures: ``payload`` is a
    callable taking the session and the caller's parameters).

    reads_table: False for a query that reads no table (``SELECT @@TRANCOUNT``, ``SELECT 1``),
    at which SQL Server opens no implicit transaction; set once when the statement is planned.

    verb: INSERT, UPDATE or DELETE for a ``dml`` plan (the TDS DONE token's command), set by
    its planner.
    """

    kind: str
    sql: str | None = None
    slots: tuple[Slot, ...] = ()
    columns: tuple[ResultColumn, ...] | None = None
    target: EmulatedTable | None = None
    updates_key: bool = False
    lock: bool = False
    writes: bool = False
    payload: Action | None = None
    reads_table: bool = True
    verb: str = ""


@dataclass
class Result:
    """What one statement returned: a result set (``columns`` + ``rows``) or a row count.

    ``more``: the result sets the same statement returned after this one (a procedure such as
    ``sp_help`` answers with several), in order; the session hands them on as further sets.
    """

    columns: tuple[ResultColumn, ...] | None
    rows: Any = None
    rowcount: int = -1
    command: str = ""  # INSERT / UPDATE / DELETE for a row count of those statements
    more: tuple[Result, ...] = ()
    messages: tuple[Any, ...] = ()  # informational messages sent before it (PRINT ...)

    @classmethod
    def of(cls, columns: Sequence[tuple[str, SqlType]], rows: list[tuple[Any, ...]]) -> Result:
        """A result set of ``rows`` with the named, typed ``columns``."""
        described = tuple(ResultColumn(name, t, t.python_type) for name, t in columns)
        return cls(described, rows, -1)


class StatementContext(Protocol):
    """The session an action plan runs in (implemented by :class:`.session.Session`)."""

    db: sqlite3.Connection
    db_name: str
    tx: Transaction | None

    def refresh_catalog(self) -> Catalog: ...

    def sqlite(
        self, sql: str, args: Sequence[Any] = (), plan: Plan | None = None
    ) -> sqlite3.Cursor: ...

    def write_scope(self, *, level: str | None = None) -> AbstractContextManager[Transaction]: ...

    def next_seq(self) -> int: ...


Action = Callable[[StatementContext, Sequence[Any]], Result | None]
