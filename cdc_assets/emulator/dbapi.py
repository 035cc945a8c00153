"""The DB-API 2.0 surface, shaped like pyodbc: ``connect``, ``Connection``, ``Cursor``, ``Row``.

Differences a pyodbc user would notice are deliberate and small: ``connect`` takes a file path;
``add_output_converter`` is accepted and ignored (values already come back as pyodbc returns them
with the SQL Server layer's converters); rows are tuples with attribute access by column name.
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import errors, faults
from .session.session import Session
from .translate.plan import Result

apilevel = "2.0"
threadsafety = 1
paramstyle = "qmark"


class Row(tuple):  # type: ignore[type-arg]
    """A result row: a tuple that also answers ``row.column_name`` (like ``pyodbc.Row``)."""

    __slots__ = ()
    cursor_description: tuple[tuple[Any, ...], ...] = ()
    _index: dict[str, int] = {}  # noqa: RUF012 - replaced per result set

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle (e.g. to ship rows between Spark processes) as a plain tuple."""
        return (tuple, (tuple(self),))

    def __getattr__(self, name: str) -> Any:
        index = self._index.get(name)
        if index is None:
            index = self._index.get(name.lower())
        if index is None:
            raise AttributeError(f"Row has no column {name!r}")
        return self[index]


class _ListRows:
    """A materialised result set with the sqlite3 cursor's fetch interface."""

    def __init__(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self._it = iter(rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return next(self._it, None)

    def fetchmany(self, size: int) -> list[tuple[Any, ...]]:
        return list(itertools.islice(self._it, size))

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._it)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return self._it

    def close(self) -> None:
        self._it = iter(())


def _row_type(description: tuple[tuple[Any, ...], ...]) -> type[Row]:
    index: dict[str, int] = {}
    for i, column in enumerate(description):
        name = column[0]
        if name:
            index.setdefault(name, i)
            index.setdefault(name.lower(), i)
    return type(
        "Row", (Row,), {"__slots__": (), "cursor_description": description, "_index": index}
    )


class Cursor:
    """A pyodbc-like cursor over one emulator connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self.fast_executemany = False
        self.messages: list[Any] = []
        self._results: list[Result] = []
        self._position = 0
        self._closed = False
        self.description: tuple[tuple[Any, ...], ...] | None = None
        self.rowcount = -1
        self._rows: Any = None
        self._row_type: type[Row] = Row
        self._sql = ""

    # -- execution ---------------------------------------------------------------------------
    @staticmethod
    def _params(params: tuple[Any, ...]) -> Sequence[Any]:
        if len(params) == 1 and isinstance(params[0], (list, tuple)):
            return params[0]
        return params

    def execute(self, sql: str, *params: Any) -> Cursor:
        self._check()
        self._reset()
        with self.connection._lock:
            self._results = self.connection._session.execute(sql, self._params(params))
        self._sql = sql
        self._position = 0
        self._select(0)
        return self

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> None:
        self._check()
        self._reset()
        with self.connection._lock:
            self.rowcount = self.connection._session.executemany(sql, list(seq_of_params))

    def _reset(self) -> None:
        if self._rows is not None and hasattr(self._rows, "close"):
            self._rows.close()
        self._rows = None
        self._results = []
        self.description = None
        self.rowcount = -1

    def _select(self, position: int) -> None:
        if position >= len(self._results):
            self._rows = None
            self.description = None
            self.rowcount = -1
            self.messages = []
            return
        result = self._results[position]
        self.messages = [m.as_pyodbc() for m in result.messages]
        if result.columns is not None:
            self.description = tuple(c.description() for c in result.columns)
            self._row_type = _row_type(self.description)
            rows = result.rows
            self._rows = _ListRows(rows) if isinstance(rows, list) else rows
            for fault in self.connection._faults or ():
                if faults.dropping(fault, self._sql):
                    self._rows = faults.DroppingRows(
                        self._rows, fault, self.connection.path, self.connection.close
                    )
            self.rowcount = -1
        else:
            self.description = None
            self._rows = None
            self.rowcount = result.rowcount

    @property
    def column_types(self) -> tuple[str | None, ...] | None:
        """Emulator extra: the SQL Server type of each column of the current result set as
        written in T-SQL (``nvarchar(50)``, ``binary(10)``), None for a column without one
        (an untyped expression); None when there is no result set. The TDS server uses it to
        describe columns on the wire (COLMETADATA)."""
        if self.description is None or self._position >= len(self._results):
            return None
        columns = self._results[self._position].columns or ()
        return tuple(None if c.type is None else c.type.sql for c in columns)

    @property
    def notices(self) -> tuple[tuple[int, int, int, str], ...]:
        """Emulator extra: the informational messages (PRINT, RAISERROR of severity 10 or less)
        sent before the current result, as (number, state, severity, text); the TDS server
        sends them as INFO tokens."""
        if self._position >= len(self._results):
            return ()
        found = self._results[self._position].messages
        return tuple((m.number, m.state, m.severity, m.text) for m in found)

    @property
    def command(self) -> str:
        """Emulator extra: ``INSERT`` / ``UPDATE`` / ``DELETE`` when the current result is the
        row count of such a statement, else "" (the TDS server puts it in the DONE token, where
        mssql-jdbc looks for it before it reports an update count)."""
        if self.description is not None or self._position >= len(self._results):
            return ""
        return self._results[self._position].command

    def nextset(self) -> bool | None:
        self._check()
        if self._rows is not None and hasattr(self._rows, "close"):
            self._rows.close()
        self._position += 1
        if self._position >= len(self._results):
            self._select(self._position)
            return None
        self._select(self._position)
        return True

    # -- fetching ----------------------------------------------------------------------------
    def _source(self) -> Any:
        self._check()
        if self.description is None:
            raise errors.ProgrammingError(
                "24000",
                f"[24000] {errors.DRIVER}No results.  Previous SQL was not a query. (0) (SQLFetch)",
                0,
            )
        return self._rows

    def fetchone(self) -> Row | None:
        row = self._source().fetchone()
        return None if row is None else self._row_type(row)

    def fetchmany(self, size: int | None = None) -> list[Row]:
        size = self.arraysize if size is None else size
        return list(map(self._row_type, self._source().fetchmany(size)))

    def fetchall(self) -> list[Row]:
        source = self._source()
        collecting = gc.isenabled()
        gc.disable()  # a million new tuples would trigger many useless collections
        try:
            return list(map(self._row_type, source.fetchall()))
        finally:
            if collecting:
                gc.enable()

    def fetchval(self) -> Any:
        """pyodbc extension: the first column of the first row (or None)."""
        row = self.fetchone()
        return None if row is None else row[0]

    def __iter__(self) -> Iterator[Row]:
        return map(self._row_type, self._source())

    def __next__(self) -> Row:
        row = self.fetchone()
        if row is None:
            raise StopIteration
        return row

    # -- misc --------------------------------------------------------------------------------
    def setinputsizes(self, sizes: Any) -> None:
        return None

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        return None

    def close(self) -> None:
        self._reset()
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise errors.interface_error("Attempt to use a closed cursor.")
        self.connection._check()

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None and not self.connection.autocommit:
            self.connection.commit()
        self.close()


class Connection:
    """A pyodbc-like connection to an emulator database file."""

    def __init__(
        self,
        path: str | Path,
        *,
        autocommit: bool = False,
        timeout: float = 30.0,
        login: str = "sa",
    ) -> None:
        self.path = str(path)
        self.timeout = timeout
        self._faults = faults.plan_for(self.path)  # injected by tests; None normally
        faults.check_connect(self.path, self._faults)
        self._session = Session(self.path, autocommit=autocommit, timeout=timeout, login=login)
        self._lock = threading.RLock()
        self._closed = False

    @property
    def autocommit(self) -> bool:
        return self._session.autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self._check()
        with self._lock:
            self._session.set_autocommit(bool(value))

    @property
    def last_commit_lsn(self) -> bytes | None:
        """Emulator extra: the commit LSN of this connection's last writing transaction."""
        value = self._session.last_commit_lsn
        return None if value is None else value.to_bytes(10, "big")

    @property
    def trancount(self) -> int:
        """Emulator extra: this connection's ``@@TRANCOUNT`` (0: no transaction open), read
        without running a statement."""
        tx = self._session.tx
        return tx.trancount if tx is not None else 0

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, sql: str, *params: Any) -> Cursor:
        return self.cursor().execute(sql, *params)

    def commit(self) -> None:
        self._check()
        with self._lock:
            self._session.commit_transaction()

    def rollback(self) -> None:
        self._check()
        with self._lock:
            self._session.rollback_transaction()

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            self._session.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def add_output_converter(self, sqltype: int, func: Any) -> None:
        """Accepted for pyodbc compatibility; values already have pyodbc's types."""

    def clear_output_converters(self) -> None:
        """Accepted for pyodbc compatibility."""

    def setdecoding(self, *args: Any, **kwargs: Any) -> None:
        """Accepted for pyodbc compatibility."""

    def setencoding(self, *args: Any, **kwargs: Any) -> None:
        """Accepted for pyodbc compatibility."""

    def _check(self) -> None:
        if self._closed:
            raise errors.interface_error("Attempt to use a closed connection.")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if self._closed:
            return
        if not self.autocommit:
            if exc_type is None:
                self.commit()
            else:
                self.rollback()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._session.db.close()
        except Exception:
            pass


def connect(
    path: str | Path, *, autocommit: bool = False, timeout: float = 30.0, login: str = "sa"
) -> Connection:
    """Open (creating if missing) the emulator database at ``path``.

    ``timeout`` (seconds) is how long a statement waits for a lock held by another connection or
    process before failing with error 1222. ``login``: what ``SUSER_SNAME()`` answers (the TDS
    server passes its client's login).
    """
    return Connection(path, autocommit=autocommit, timeout=timeout, login=login)
