"""Embedded SQL Server CDC emulator: a pyodbc-like DB-API over a SQLite file.

``connect(path)`` accepts the T-SQL the SQL Server layer sends (see CONTRACT.md), translated with
sqlglot and run on SQLite in WAL mode, so many connections and processes can share one file.
:class:`CaptureAgent`, :func:`scan` and :func:`cleanup` play SQL Server Agent's CDC jobs.
No Dagster and no Spark here.

Sub-packages, bottom up (each imports only from itself and those above it in this list, and
from ``errors``; ``cdc_assets_tests/emulator/test_layers.py`` checks it, and that no module
imports in a circle):

- ``errors``: SQL Server's errors, raised as pyodbc raises them (every part uses it);
- ``values/``: SQL Server types, their SQLite storage forms, the SQLite functions over values;
- ``catalog/``: the database file's layout, the system tables and views, the catalog of tables
  and capture instances;
- ``cdc/``: change capture: the triggers that log changes, the capture and cleanup jobs, the CDC
  functions;
- ``transactions/``: a session's transactions, savepoints and LSNs;
- ``batches/``: the T-SQL front end: a batch split into statements, control flow and variables;
- ``translate/``: one statement parsed (sqlglot) and translated to SQLite: queries, expressions,
  system functions, INSERT / UPDATE / DELETE;
- ``ddl/``: CREATE / ALTER / DROP;
- ``procedures/``: ``EXEC`` and the system procedures (CDC, help, ODBC catalog);
- ``session/``: one connection's engine, running batches;
- ``dbapi`` (the pyodbc-like API a wire server or a test uses) and ``faults`` (faults tests
  inject). The settings of a source configured with ``emulator:`` are
  :mod:`cdc_assets.emulator_source`, outside this package (it imports this package only when a
  connection opens).

The demo tables and the workload that drives them are in :mod:`cdc_assets.workload` (plain
T-SQL over any connection); nothing here imports them, nor the SQL Server layer.
"""

from .catalog.storage import is_emulator_database
from .cdc.capture import CaptureAgent, cleanup, scan
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
