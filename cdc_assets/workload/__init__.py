"""A CDC source's workload: the demo tables and realistic transactions, as plain T-SQL.

Everything here speaks T-SQL through ``cursor.execute`` of any DB-API connection (the statement
shapes of the emulator's ``CONTRACT.md``), so the same code drives the emulator
(``cdc_assets.emulator.connect``), the emulator served over TDS and a real SQL Server (pyodbc).
The demo, the tests and the benchmarks use it; the emulator does not.

Modules, bottom up (each imports only from the rows above it):

- ``demo_schema``: the demo tables as data (:class:`TableDef`, :class:`ColumnDef`,
  :data:`DEMO_TABLES`), with their ``CREATE TABLE`` and ``sp_cdc_enable_table`` text;
- ``random_values``: a random value of a column's SQL Server type, and the parameter sent for it;
- ``table_model``: what every table must contain, journaled per transaction;
- ``random_rows`` (new rows, free keys, changes) and ``modelled_writes`` (the INSERT, UPDATE and
  DELETE statements that keep the model in step);
- ``transaction_kinds``: the body of each kind of transaction;
- ``workload``: :class:`Workload`, which runs them seeded, one transaction at a time;
- ``captured_tables``: :func:`create_demo_database`, :func:`small_tables`,
  :func:`create_captured_tables`.
"""

from .captured_tables import create_captured_tables, create_demo_database, small_tables
from .demo_schema import DEMO_TABLES, ColumnDef, ParentRef, TableDef, table_by_name
from .random_values import generate_value, to_parameter
from .table_model import WorkloadError, read_rows
from .transaction_kinds import TRANSACTION_KINDS
from .workload import StepResult, Workload, WorkloadStats

__all__ = [
    "DEMO_TABLES",
    "TRANSACTION_KINDS",
    "ColumnDef",
    "ParentRef",
    "StepResult",
    "TableDef",
    "Workload",
    "WorkloadError",
    "WorkloadStats",
    "create_captured_tables",
    "create_demo_database",
    "generate_value",
    "read_rows",
    "small_tables",
    "table_by_name",
    "to_parameter",
]
