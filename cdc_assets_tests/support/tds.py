"""Real SQL Server clients connected to the emulator's TDS server, for tests.

``CLIENTS``: pyodbc + Microsoft ODBC Driver 18 (the PyPI wheel, loaded by path), pyodbc + FreeTDS
(Debian's tdsodbc) and python-tds. :func:`wire_connect` opens one of them as a pyodbc-shaped
DB-API connection (python-tds through :class:`PytdsConnection`, which takes ``?`` placeholders
and ``conn.execute``, and returns uniqueidentifier as a str like pyodbc), so the emulator's own
tests can run through each of them unchanged.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from typing import Any

from cdc_assets.sqlserver.arrow_types import datetimeoffset_from_odbc
from cdc_assets.sqlserver.connection import FREETDS_DRIVER, OdbcSettings
from cdc_assets.sqlserver.odbc_drivers import msodbcsql18_path

CLIENTS = ("odbc18", "freetds", "pytds")
USER = "cdc_test"
PASSWORD = "Tds;pw{1=x"  # needs braces in a connection string (no "}": FreeTDS 1.3)
PASSWORD_ENV = "CDC_TEST_TDS_PASSWORD"
DATABASE = "salesdb"
# Spark's Python workers inherit the environment of the JVM, started on first use of the session
# fixture, after collection: set here (imported by conftest at collection), they see it.
os.environ.setdefault(PASSWORD_ENV, PASSWORD)


def odbc18_driver() -> str:
    path = msodbcsql18_path()
    assert path is not None, "mssql-python-odbc is a dev dependency: run make setup"
    return str(path)


def odbc_settings(
    client: str, port: int, *, database: str = DATABASE, **extra: Any
) -> OdbcSettings:
    """What a user writes under ``odbc:`` for the server at 127.0.0.1:``port``."""
    values: dict[str, Any] = {
        "server": "127.0.0.1",
        "port": port,
        "database": database,
        "user": USER,
        "password_env": PASSWORD_ENV,
        "driver": odbc18_driver() if client == "odbc18" else FREETDS_DRIVER,
        "encrypt": "yes",
        "trust_server_certificate": True,
        "login_timeout": 10,
    }
    values.update(extra)
    return OdbcSettings(**values)


def _pyodbc(client: str, port: int, *, autocommit: bool, database: str) -> Any:
    import pyodbc

    settings = odbc_settings(client, port, database=database, password=PASSWORD, password_env=None)
    conn = pyodbc.connect(
        settings.connection_string(redact=False), autocommit=autocommit, timeout=10
    )
    conn.add_output_converter(-155, datetimeoffset_from_odbc)
    return conn


class PytdsCursor:
    """A python-tds cursor that takes ``?`` placeholders and pyodbc's ``execute(sql, *params)``."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, *params: Any) -> PytdsCursor:
        import pytds

        if len(params) == 1 and isinstance(params[0], (list, tuple)):
            params = tuple(params[0])
        # python-tds sends bytes as varchar (decoded as UTF-8) unless wrapped in pytds.Binary
        params = tuple(pytds.Binary(p) if isinstance(p, bytes) else p for p in params)
        try:
            if params:
                sql = sql.replace("%", "%%").replace("?", "%s")
                self._cursor.execute(sql, tuple(params))
            else:
                self._cursor.execute(sql)
        except pytds.Error as exc:
            number = getattr(exc, "number", None)
            if number is None:
                raise
            # pyodbc's shape: the number in the text (python-tds keeps it in .number only)
            raise type(exc)(f"{exc.args[0]} ({number})") from exc
        return self

    @staticmethod
    def _row(row: Any) -> Any:
        """uniqueidentifier as pyodbc returns it (upper-case str; python-tds: uuid.UUID)."""
        if row is None or not any(isinstance(v, uuid.UUID) for v in row):
            return row
        values = [str(v).upper() if isinstance(v, uuid.UUID) else v for v in row]
        return type(row)(*values)

    def fetchone(self) -> Any:
        return self._row(self._cursor.fetchone())

    def fetchmany(self, size: int | None = None) -> list[Any]:
        rows = self._cursor.fetchmany(size) if size is not None else self._cursor.fetchmany()
        return [self._row(r) for r in rows]

    def fetchall(self) -> list[Any]:
        return [self._row(r) for r in self._cursor.fetchall()]

    def fetchval(self) -> Any:
        row = self._cursor.fetchone()
        return None if row is None else self._row(row)[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __iter__(self) -> Any:
        return (self._row(r) for r in self._cursor)


class PytdsConnection:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self) -> PytdsCursor:
        return PytdsCursor(self._conn.cursor())

    def execute(self, sql: str, *params: Any) -> PytdsCursor:
        return self.cursor().execute(sql, *params)

    @property
    def autocommit(self) -> bool:
        return bool(self._conn.autocommit)

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self._conn.autocommit = value

    def add_output_converter(self, *_: Any) -> None:
        """python-tds converts datetimeoffset itself."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _pytds(port: int, *, autocommit: bool, database: str) -> PytdsConnection:
    import pytds

    conn = pytds.connect(
        "127.0.0.1",
        database,
        USER,
        PASSWORD,
        port=port,
        autocommit=autocommit,
        login_timeout=10,
        row_strategy=pytds.namedtuple_row_strategy,
    )
    return PytdsConnection(conn)


def wire_connect(
    client: str, port: int, *, autocommit: bool = True, database: str = DATABASE
) -> Any:
    """A DB-API connection through ``client`` to the TDS server on 127.0.0.1:``port``."""
    if client == "pytds":
        return _pytds(port, autocommit=autocommit, database=database)
    return _pyodbc(client, port, autocommit=autocommit, database=database)


def plain(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in rows]
