"""Reading the Delta tables the way a user without Spark does: DuckDB with its Delta extension
(from the PyPI wheel ``duckdb-ext-delta``, nothing downloaded), which reads deletion vectors;
delta-rs (``deltalake``) reads the log and tables without them."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from cdc_assets.spark.stored_columns import stored_name


def delta_extension() -> Path:
    import duckdb_ext  # a namespace package: the extension files sit beside it

    version = duckdb.__version__
    for root in duckdb_ext.__path__:
        found = sorted(Path(root).glob(f"extensions/v{version}/*/delta.duckdb_extension"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no Delta extension for DuckDB {version} in duckdb-ext-delta")


@functools.cache
def _duckdb_with_delta() -> duckdb.DuckDBPyConnection:
    """One in-memory DuckDB database per process with the Delta extension loaded: a new
    database and its extension cost ~150 ms, a scan of a small table ~1 ms."""
    conn = duckdb.connect()
    conn.execute(f"LOAD '{delta_extension()}'")
    return conn


def read_with_duckdb(
    path: str, columns: Sequence[str], where: str = "", params: Sequence[Any] = ()
) -> list[tuple]:
    """The rows of the Delta table at ``path`` (``columns`` by their source names), read
    through a cursor of its own (DuckDB's cursors share the database, not their state); only
    those ``where`` (a DuckDB condition on stored names, ``?`` for ``params``) when given."""
    names = ", ".join('"' + stored_name(c).replace('"', '""') + '"' for c in columns)
    condition = f" WHERE {where}" if where else ""
    with _duckdb_with_delta().cursor() as cursor:
        query = f"SELECT {names} FROM delta_scan(?){condition}"
        return cursor.execute(query, [path, *params]).fetchall()


def read_with_query_builder(path: str, columns: Sequence[str]) -> list[tuple]:
    """The rows of the Delta table at ``path`` (``columns`` by their source names) as delta-rs's
    SQL (``QueryBuilder``, DataFusion) reads them: deletion vectors included."""
    from deltalake import DeltaTable, QueryBuilder

    names = ", ".join('"' + stored_name(c).replace('"', '""') + '"' for c in columns)
    query = QueryBuilder().register("t", DeltaTable(path))
    batches = query.execute(f"SELECT {names} FROM t").read_all()
    return [tuple(row.values()) for row in pa.table(batches).to_pylist()]


def normal_value(value: Any) -> Any:
    """``value`` as rows from different readers compare: an aware datetime as naive UTC, a
    bytes-like value as ``bytes``."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def multiset(rows: Iterable[Sequence[Any]]) -> Counter:
    return Counter(tuple(normal_value(v) for v in row) for row in rows)
