"""Cutting a table into key ranges of about ``chunk_rows`` rows, so a snapshot reads in parallel.

The bounds are keys taken from the table itself (every ``chunk_rows``-th key in key order, one
``ROW_NUMBER`` scan of the key), so the server compares them with its own collation and types.
The chunks ``(None, k1], (k1, k2], …, (kn, None)`` cover every key, including keys inserted
after the bounds were read. A table without key is one chunk.

https://learn.microsoft.com/en-us/sql/t-sql/functions/row-number-transact-sql
"""

from __future__ import annotations

from .catalog import CaptureInstance
from .dbapi import DbapiConnection, fetch_all
from .quoting import quote_name, quote_table
from .snapshot import KeyRange, count_rows

__all__ = ["plan_key_ranges"]

# Every n-th key in key order but the last row's (no empty last chunk), e.g. for key (a, b):
# SELECT [a], [b] FROM (SELECT [a], [b], ROW_NUMBER() OVER (ORDER BY [a], [b]) AS rn
#   FROM [dbo].[t]) AS numbered WHERE rn % ? = 0 AND rn < ? ORDER BY [a], [b]
BOUNDARY_KEYS_QUERY = (
    "SELECT {keys} FROM (SELECT {keys}, ROW_NUMBER() OVER (ORDER BY {keys}) AS rn "
    "FROM {table}) AS numbered WHERE rn % ? = 0 AND rn < ? ORDER BY {keys}"
)


def plan_key_ranges(
    conn: DbapiConnection, instance: CaptureInstance, chunk_rows: int, *, rows: int | None = None
) -> list[KeyRange]:
    """Key ranges of about ``chunk_rows`` rows each covering the whole key space of the table
    (``rows``: its rows, when counted already)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be at least 1; got {chunk_rows}")
    keys = instance.key_columns
    if not keys:
        return [KeyRange()]
    if rows is None:
        rows = count_rows(conn, instance.source_schema, instance.source_table)
    if rows <= chunk_rows:
        return [KeyRange()]
    key_list = ", ".join(quote_name(k) for k in keys)
    table = quote_table(instance.source_schema, instance.source_table)
    bounds = [
        tuple(row)
        for row in fetch_all(
            conn, BOUNDARY_KEYS_QUERY.format(keys=key_list, table=table), chunk_rows, rows
        )
    ]
    ranges: list[KeyRange] = []
    after: tuple[object, ...] | None = None
    for bound in bounds:
        ranges.append(KeyRange(after, bound))
        after = bound
    ranges.append(KeyRange(after, None))
    return ranges
