"""Cutting a table into key ranges of about ``chunk_rows`` rows, so a snapshot reads in parallel.

The bounds are keys taken from the table itself (every ``chunk_rows``-th key in key order, one
``ROW_NUMBER`` scan of the key), so the server compares them with its own collation and types.
The chunks ``(None, k1], (k1, k2], …, (kn, None)`` cover every key, including keys inserted
after the bounds were read. A table without key is one chunk. A snapshot resumed after its key
``k`` plans the keys above ``k`` only: ``(k, k1'], …, (kn', None)``.

How many rows to expect comes from the table's row count estimate (``sys.partitions``, which
the engine keeps up to date with every change; no scan), so a billion-row table is not counted
before it is read.

https://learn.microsoft.com/en-us/sql/t-sql/functions/row-number-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-catalog-views/sys-partitions-transact-sql
"""

from __future__ import annotations

from typing import Any

from .catalog import CaptureInstance
from .dbapi import DbapiConnection, fetch_all, fetch_value
from .quoting import quote_name, quote_table
from .snapshot import KeyRange, count_rows, key_condition

__all__ = ["estimate_rows", "plan_key_ranges"]

# Every n-th key in key order but the last row's (no empty last chunk), e.g. for key (a, b):
# SELECT [a], [b] FROM (SELECT [a], [b], ROW_NUMBER() OVER (ORDER BY [a], [b]) AS rn
#   FROM [dbo].[t]) AS numbered WHERE rn % ? = 0 AND rn < ? ORDER BY [a], [b]
# (a resumed snapshot: FROM [dbo].[t] WHERE (([a] > ?) OR ([a] = ? AND [b] > ?)))
BOUNDARY_KEYS_QUERY = (
    "SELECT {keys} FROM (SELECT {keys}, ROW_NUMBER() OVER (ORDER BY {keys}) AS rn "
    "FROM {table}{where}) AS numbered WHERE rn % ? = 0 AND rn < ? ORDER BY {keys}"
)
# The rows above a resumed snapshot's last key (when no estimate is given)
COUNT_ABOVE_QUERY = "SELECT COUNT_BIG(*) FROM {table}{where}"
# The engine's row count of the table (heap or clustered index: index_id 0 or 1), kept up to
# date with every change; NULL when there is no such table.
ROW_ESTIMATE_QUERY = (
    "SELECT SUM(p.rows) FROM sys.partitions AS p "
    "WHERE p.object_id = OBJECT_ID(?) AND p.index_id IN (0, 1)"
)


def estimate_rows(conn: DbapiConnection, schema: str, table: str) -> int | None:
    """The table's row count estimate (``sys.partitions``: no scan); None when unknown."""
    value = fetch_value(conn, ROW_ESTIMATE_QUERY, quote_table(schema, table))
    return None if value is None else int(value)


def plan_key_ranges(
    conn: DbapiConnection,
    instance: CaptureInstance,
    chunk_rows: int,
    *,
    rows: int | None = None,
    after: tuple[Any, ...] | None = None,
) -> list[KeyRange]:
    """Key ranges of about ``chunk_rows`` rows each covering the whole key space of the table
    above ``after`` (None: all of it); ``rows``: about how many rows that is, when known
    (counted otherwise)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1; got {chunk_rows}")
    keys = instance.key_columns
    masked_keys = [c.name for c in instance.columns if c.name in keys and c.mask is not None]
    if masked_keys and after is None:
        # chunk bounds are raw key values, recorded with each commit to resume: a hashed key's
        # would reach the lake. Such a table is read in one piece.
        return [KeyRange()]
    if not keys:
        if after is not None:
            raise ValueError(f"{instance.name}: a table without key cannot be read in key ranges")
        return [KeyRange()]
    where, params = "", []
    if after is not None:
        condition, params = key_condition(keys, after)
        where = f" WHERE {condition}"
    table = quote_table(instance.source_schema, instance.source_table)
    if rows is None:
        if after is None:
            rows = count_rows(conn, instance.source_schema, instance.source_table)
        else:
            query = COUNT_ABOVE_QUERY.format(table=table, where=where)
            rows = int(fetch_value(conn, query, *params) or 0)
    if rows <= chunk_rows:
        return [KeyRange(after, None)]
    key_list = ", ".join(quote_name(k) for k in keys)
    query = BOUNDARY_KEYS_QUERY.format(keys=key_list, table=table, where=where)
    bounds = [tuple(row) for row in fetch_all(conn, query, *params, chunk_rows, rows)]
    ranges: list[KeyRange] = []
    lower: tuple[Any, ...] | None = after
    for bound in bounds:
        ranges.append(KeyRange(lower, bound))
        lower = bound
    ranges.append(KeyRange(lower, None))
    return ranges
