"""Tables created and enabled for CDC in one call: the demo database, or many small tables.

:func:`create_demo_database` enables CDC and snapshot isolation, creates the demo tables of
:mod:`.demo_schema` (or the ones given), enables them for capture and loads initial rows through a
:class:`~.workload.Workload`. :func:`create_captured_tables` creates many small tables fast (the
many-tables tests and benchmark). Plain T-SQL: both work on SQL Server too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.quoting import quote_name

from .demo_schema import DEMO_TABLES, ColumnDef, TableDef
from .modelled_writes import MAX_VALUES_ROWS
from .table_model import parents_first
from .workload import Workload

__all__ = ["create_captured_tables", "create_demo_database", "small_tables"]


def create_demo_database(
    conn: Any,
    *,
    seed: int = 0,
    rows_per_table: int = 1000,
    tables: Sequence[TableDef] = DEMO_TABLES,
    polling_interval: int | None = 1,
    record: bool = False,
) -> Workload:
    """Enable CDC and snapshot isolation, create and enable ``tables``, load initial rows.

    Returns the :class:`Workload` that loaded the rows (its model holds them), ready to run more
    transactions with the same random stream. ``polling_interval`` (seconds) sets the capture
    job's polling (SQL Server's default is 5); None leaves it alone.
    """
    if getattr(conn, "autocommit", True) is not True:
        conn.autocommit = True
    cdc_admin.enable_database(conn)
    cursor = conn.cursor()
    try:
        cursor.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        ordered = parents_first(tables)
        for table in ordered:
            cursor.execute(table.create_sql())
    finally:
        cursor.close()
    for table in ordered:
        cdc_admin.run(conn, table.enable_cdc_statement())
    if polling_interval is not None:  # sp_cdc_change_job takes effect when the job restarts
        cdc_admin.change_job(conn, "capture", polling_interval=int(polling_interval))
        cdc_admin.restart_job(conn, "capture")
    workload = Workload(conn, seed=seed, tables=ordered, load=False, record=record)
    workload.seed_rows(rows_per_table)
    return workload


def small_tables(count: int, *, prefix: str = "t", schema: str = "dbo") -> tuple[TableDef, ...]:
    """``count`` small tables ``<schema>.<prefix>0000`` ...: ``id`` (key), ``name``, ``qty``."""
    width = max(4, len(str(count - 1)))
    columns = (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("name", "nvarchar(50)", hint="name"),
        ColumnDef("qty", "int", hint="quantity"),
    )
    return tuple(
        TableDef(schema, f"{prefix}{i:0{width}d}", columns, primary_key=("id",))
        for i in range(count)
    )


def create_captured_tables(
    conn: Any,
    count: int,
    *,
    prefix: str = "t",
    schema: str = "dbo",
    rows_per_table: int = 1,
    timings: dict[str, float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[TableDef, ...]:
    """Create ``count`` small CDC-enabled tables (see :func:`small_tables`) quickly.

    Enables CDC and snapshot isolation on the database if needed, creates and enables every
    table (net changes on), then inserts ``rows_per_table`` rows per table (``id`` 1, 2, ...;
    ``qty`` = ``id``) in one transaction. Plain T-SQL: works on SQL Server too. Returns the
    table definitions (a :class:`Workload` can run on them). ``timings``, if given, receives the
    seconds of the ``create``, ``enable`` and ``rows`` steps, as measured by ``clock``.
    """
    if getattr(conn, "autocommit", True) is not True:
        conn.autocommit = True
    tables = small_tables(count, prefix=prefix, schema=schema)
    cursor = conn.cursor()
    try:
        if not cdc_admin.database_enabled(conn):
            cdc_admin.enable_database(conn)
            cursor.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        if (
            schema.lower() != "dbo"
            and not cursor.execute("SELECT 1 FROM sys.schemas WHERE name = ?", (schema,)).fetchone()
        ):
            cursor.execute(f"CREATE SCHEMA {quote_name(schema)}")
        started = clock()
        for table in tables:
            cursor.execute(table.create_sql())
        if timings is not None:
            timings["create"] = clock() - started
        started = clock()
        for table in tables:
            cdc_admin.run(conn, table.enable_cdc_statement())
        if timings is not None:
            timings["enable"] = clock() - started
        started = clock()
        if rows_per_table > 0:
            cursor.execute("BEGIN TRANSACTION")
            try:
                for table in tables:
                    for first in range(1, rows_per_table + 1, MAX_VALUES_ROWS):
                        ids = range(first, min(rows_per_table, first + MAX_VALUES_ROWS - 1) + 1)
                        values = ", ".join(f"({i}, N'row {i}', {i})" for i in ids)
                        cursor.execute(
                            f"INSERT INTO {table.quoted} ([id], [name], [qty]) VALUES {values}"
                        )
                cursor.execute("COMMIT TRANSACTION")
            except BaseException:
                with contextlib.suppress(Exception):
                    cursor.execute("ROLLBACK TRANSACTION")
                raise
        if timings is not None:
            timings["rows"] = clock() - started
    finally:
        cursor.close()
    return tables
