"""The DB-API surface this layer uses, and the one place where driver errors are translated.

Both pyodbc and the emulator satisfy :class:`DbapiConnection`. Every statement of this package is
sent through :func:`execute`, so a driver exception never escapes untranslated: it becomes a
:class:`~.errors.SqlServerError` (raised ``from`` the original for debugging).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from .errors import is_dbapi_error, translate_dbapi_error

__all__ = ["DbapiConnection", "DbapiCursor", "execute", "fetch_all", "fetch_value", "translating"]


class DbapiCursor(Protocol):
    description: Sequence[tuple[Any, ...]] | None

    def execute(self, sql: str, *params: Any) -> Any: ...
    def fetchone(self) -> Sequence[Any] | None: ...
    def fetchmany(self, size: int) -> Sequence[Sequence[Any]]: ...
    def fetchall(self) -> Sequence[Sequence[Any]]: ...
    def close(self) -> None: ...


class DbapiConnection(Protocol):
    autocommit: bool

    def cursor(self) -> Any: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...
    def close(self) -> None: ...


@contextmanager
def translating(**context: Any) -> Iterator[None]:
    """Translate DB-API errors raised inside the block (``context`` goes to the translation)."""
    try:
        yield
    except Exception as exc:
        if is_dbapi_error(exc):
            raise translate_dbapi_error(exc, **context) from exc
        raise


def execute(conn: DbapiConnection, sql: str, *params: Any, **context: Any) -> DbapiCursor:
    """Run ``sql`` with qmark ``params`` on a new cursor; DB-API errors are translated."""
    with translating(**context):
        cursor = conn.cursor()
        cursor.execute(sql, *params)
        return cursor


def fetch_value(conn: DbapiConnection, sql: str, *params: Any, **context: Any) -> Any:
    """The first column of the first row (None when there is no row)."""
    cursor = execute(conn, sql, *params, **context)
    with translating(**context):
        row = cursor.fetchone()
        cursor.close()
    return None if row is None else row[0]


def fetch_all(conn: DbapiConnection, sql: str, *params: Any, **context: Any) -> list[Any]:
    """All rows of ``sql``."""
    cursor = execute(conn, sql, *params, **context)
    with translating(**context):
        rows = list(cursor.fetchall())
        cursor.close()
    return rows
