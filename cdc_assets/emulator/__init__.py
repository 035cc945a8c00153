"""Embedded SQL Server CDC emulator: a pyodbc-like DB-API over a SQLite file.

``connect(path)`` accepts the T-SQL the SQL Server layer sends (see CONTRACT.md), translated with
sqlglot and run on SQLite in WAL mode, so many connections and processes can share one file.
:class:`CaptureAgent`, :func:`scan` and :func:`cleanup` play SQL Server Agent's CDC jobs.
No Dagster and no Spark here.

Modules, bottom up (each imports only from the rows above it; ``test_layers.py`` checks there is
no import circle):

- ``errors``, ``sqlite_values`` (values in their SQLite storage forms), ``types`` (SQL Server
  types and their SQLite storage), ``type_parsing``, ``untyped_values``, ``system_objects`` (the
  system tables and views, typed), ``storage`` (the file layout), ``system_views`` (the views'
  SQL), ``constraint_rows`` (the rows behind ``sys.key_constraints``, ``sys.indexes``),
  ``bootstrap`` (the layout made in a new file, brought up to date in an older one), ``catalog``
  (tables and capture instances, refreshed incrementally), ``transaction_log`` (the triggers that
  log changes), ``functions`` (SQLite text of the CDC functions);
- ``batch_statement``, ``variable_statements``, ``batch`` (a batch split into statements),
  ``plan`` (what a statement translates to, what it returns), ``statements`` (parses a statement
  and dispatches it to the planner registered for its kind);
- the translator: ``scope``, ``type_rules``, ``source_text`` (the user's T-SQL in error
  messages), ``translator_core``, ``expressions``, ``system_functions``, ``queries``, assembled
  in ``translate``;
- the other planners: ``dml``, ``ddl`` (over ``create_table`` and ``alter_table``) and
  ``procedures`` (``EXEC`` and the registry of system procedures), with ``catalog_rows`` and
  ``capture`` (the agent's jobs); the procedures: ``cdc_procedures`` (``sp_cdc_enable_db``,
  ``sp_cdc_enable_table`` ...), ``cdc_job_procedures`` (the agent's jobs, scan, cleanup),
  ``cdc_help_procedures`` (``sp_cdc_help_*``, ``sp_cdc_get_*``), ``help_procedures``
  (``sp_help`` ...), ``catalog_procedures``;
- ``session_functions`` (the SQLite functions bound to a session), ``session_transactions``
  (transactions, LSNs), ``session`` (execution), ``dbapi`` (the pyodbc-like API a wire server or a
  test uses). The settings of a source configured with ``emulator:`` are
  :mod:`cdc_assets.emulator_source`, outside this package (it imports this package only when a
  connection opens).

The demo tables and the workload that drives them are in :mod:`cdc_assets.workload` (plain
T-SQL over any connection); nothing here imports them, nor the SQL Server layer.
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
