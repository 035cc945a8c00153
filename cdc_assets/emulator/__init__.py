"""Embedded SQL Server CDC emulator: a pyodbc-like DB-API over a SQLite file.

``connect(path)`` accepts the T-SQL the SQL Server layer sends (see CONTRACT.md), translated with
sqlglot and run on SQLite in WAL mode, so many connections and processes can share one file.
:class:`CaptureAgent`, :func:`scan` and :func:`cleanup` play SQL Server Agent's CDC jobs.
No Dagster and no Spark here.
"""

from .capture import CaptureAgent, cleanup, scan
from .dbapi import Connection, Cursor, Row, apilevel, connect, paramstyle, threadsafety
from .errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)
from .storage import is_emulator_database

__all__ = [
    "CaptureAgent",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Error",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "NotSupportedError",
    "OperationalError",
    "ProgrammingError",
    "Row",
    "Warning",
    "apilevel",
    "cleanup",
    "connect",
    "is_emulator_database",
    "paramstyle",
    "scan",
    "threadsafety",
]
