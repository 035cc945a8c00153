"""Reading change rows for an LSN range ``(lo, hi]``, as Arrow record batches, without losing any.

Rows come from the change table ``cdc.<ci>_CT`` itself rather than from
``cdc.fn_cdc_get_all_changes_<ci>``: only the table carries ``__$command_id``, and the order
SQL Server defines is (``__$start_lsn``, ``__$command_id``, ``__$seqval``, ``__$operation``) —
``__$seqval`` alone misorders some statements of one transaction. Each row is joined to its
commit time from ``cdc.lsn_time_mapping``.

Reading the table directly skips the validity check the query functions make (error 313), so
:func:`read_changes` makes it itself, twice:

1. before the read: ``min LSN(ci) <= lo + 1`` (nothing of the range was cleaned up) and
   ``hi <= max LSN`` (everything of the range is captured);
2. after the read: the min LSN again — cleanup running *during* the read could have deleted rows
   already passed by. A failure raises :class:`~.errors.LsnNotAvailable` after the last batch, so
   a consumer must treat the batches as invalid unless the iterator finished normally.

:func:`read_function_changes` reads through the query functions instead (net changes, or
``all update old``) and maps error 313 to the same exception with the interval filled in.

https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-capture-instance-ct-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/cdc-fn-cdc-get-all-changes-capture-instance-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/cdc-fn-cdc-get-net-changes-capture-instance-transact-sql
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pyarrow as pa

from cdc_assets.lsn import Lsn, LsnRange, change_order

from .arrow_types import (
    COMMIT_TIME,
    METADATA_FIELDS,
    ArrowSchema,
    arrow_schema,
    read_record_batches,
)
from .catalog import CaptureInstance
from .column_masks import masked_select
from .dbapi import DbapiConnection, execute, fetch_all, fetch_value
from .errors import LsnNotAvailable
from .lsn_queries import get_max_lsn, get_min_lsn
from .quoting import change_table, query_function, quote_name
from .snapshot import COUNT_ROWS_QUERY

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "change_schema",
    "changed_lsns",
    "check_range_available",
    "count_change_rows",
    "count_changes",
    "read_changes",
    "read_function_changes",
]

DEFAULT_BATCH_ROWS = 10_000


def change_schema(instance: CaptureInstance) -> ArrowSchema:
    """Metadata columns, the captured columns (all nullable), then ``__$commit_time``."""
    return arrow_schema(
        instance.columns, prefix=METADATA_FIELDS, suffix=(COMMIT_TIME,), all_nullable=True
    )


def check_range_available(
    conn: DbapiConnection, instance: str, lsn_range: LsnRange
) -> tuple[Lsn, Lsn]:
    """Raise :class:`~.errors.LsnNotAvailable` unless ``(lo, hi]`` lies in the validity interval
    of ``instance``; returns the interval ``(min LSN, max LSN)``."""
    maximum = get_max_lsn(conn)
    minimum = get_min_lsn(conn, instance)
    if lsn_range.hi > maximum:
        raise LsnNotAvailable(
            instance, lsn_range, minimum, maximum, reason="the capture job has not reached hi yet"
        )
    if minimum > lsn_range.first:
        raise LsnNotAvailable(
            instance,
            lsn_range,
            minimum,
            maximum,
            reason="changes above lo were removed by cleanup (or precede the capture instance)",
        )
    return minimum, maximum


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-capture-instance-ct-transact-sql
CHANGE_ROWS_QUERY = """
SELECT ct.[__$start_lsn], ct.[__$command_id], ct.[__$seqval], ct.[__$operation],
       ct.[__$update_mask], {columns}, m.tran_end_time
FROM {change_table} AS ct
LEFT JOIN cdc.lsn_time_mapping AS m ON m.start_lsn = ct.[__$start_lsn]
WHERE ct.[__$start_lsn] > ? AND ct.[__$start_lsn] <= ?
ORDER BY {order}
"""


def change_rows_query(instance: CaptureInstance) -> str:
    columns = ", ".join(masked_select(c, f"ct.{quote_name(c.name)}") for c in instance.columns)
    order = change_order(lambda c: f"ct.{quote_name(c)}")
    return CHANGE_ROWS_QUERY.format(
        columns=columns, change_table=instance.change_table, order=order
    )


def read_changes(
    conn: DbapiConnection,
    instance: CaptureInstance,
    lsn_range: LsnRange,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The changes ``lo < __$start_lsn <= hi`` of ``instance`` in SQL Server's order, in record
    batches of at most ``batch_rows`` rows (schema: :func:`change_schema`).

    The validity interval is checked before and after the read (module doc); the final check
    raises :class:`~.errors.LsnNotAvailable` if cleanup overtook the read.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1; got {batch_rows}")
    check_range_available(conn, instance.name, lsn_range)
    schema = change_schema(instance)
    context = {"capture_instance": instance.name, "requested": lsn_range}
    cursor = execute(
        conn, change_rows_query(instance), lsn_range.lo.raw, lsn_range.hi.raw, **context
    )
    yield from read_record_batches(cursor, schema, batch_rows, **context)
    minimum = get_min_lsn(conn, instance.name)
    if minimum > lsn_range.first:
        raise LsnNotAvailable(
            instance.name,
            lsn_range,
            minimum,
            None,
            reason="cleanup moved the minimum LSN while the range was being read",
        )


# Not in the original contract list: added (see CONTRACT.md) for per-operation row counts.
COUNT_CHANGES_QUERY = """
SELECT ct.[__$operation], COUNT(*) AS n
FROM {change_table} AS ct
WHERE ct.[__$start_lsn] > ? AND ct.[__$start_lsn] <= ?
GROUP BY ct.[__$operation]
"""


def count_changes(
    conn: DbapiConnection, instance: CaptureInstance, lsn_range: LsnRange
) -> dict[int, int]:
    """Change rows per ``__$operation`` (1 delete, 2 insert, 3/4 update before/after) in the
    range, after the same validity check as :func:`read_changes`."""
    check_range_available(conn, instance.name, lsn_range)
    return count_changes_unchecked(conn, instance, lsn_range)


def count_changes_unchecked(
    conn: DbapiConnection, instance: CaptureInstance, lsn_range: LsnRange
) -> dict[int, int]:
    """:func:`count_changes` without the validity check: the caller proves afterwards (min LSN
    still at most ``lo + 1``) that cleanup removed nothing before the count."""
    rows = fetch_all(
        conn,
        COUNT_CHANGES_QUERY.format(change_table=instance.change_table),
        lsn_range.lo.raw,
        lsn_range.hi.raw,
    )
    return {int(op): int(n) for op, n in sorted(rows)}


def count_change_rows(conn: DbapiConnection, capture_instance: str) -> int:
    """All rows in the change table of ``capture_instance`` (every LSN cleanup has left)."""
    return int(fetch_value(conn, COUNT_ROWS_QUERY.format(table=change_table(capture_instance))))


CHANGE_LSNS_QUERY = "SELECT DISTINCT [__$start_lsn] FROM {change_table}"


def changed_lsns(conn: DbapiConnection, capture_instance: str) -> set[Lsn]:
    """The commit LSNs of the transactions that have change rows of ``capture_instance``."""
    rows = fetch_all(conn, CHANGE_LSNS_QUERY.format(change_table=change_table(capture_instance)))
    return {Lsn.from_bytes(lsn) for (lsn,) in rows}


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/cdc-fn-cdc-get-all-changes-capture-instance-transact-sql
ALL_CHANGES_QUERY = "SELECT * FROM {function}(?, ?, N'{row_filter}')"

_ROW_FILTERS = {
    "all": ("all", "all update old"),
    "net": ("all", "all with mask", "all with merge"),
}


def read_function_changes(
    conn: DbapiConnection,
    instance: CaptureInstance,
    lsn_range: LsnRange,
    *,
    kind: Literal["all", "net"] = "all",
    row_filter: str = "all",
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """The range through ``cdc.fn_cdc_get_{kind}_changes_<ci>(lo + 1, hi, row_filter)``.

    The metadata columns are whatever the function returns (``__$start_lsn``, ``__$seqval``,
    ``__$operation``, ``__$update_mask`` for ``all``; no ``__$seqval`` for ``net``) followed by
    the captured columns. Error 313 becomes :class:`~.errors.LsnNotAvailable` with the interval.
    """
    if instance.excluded_columns or any(c.mask is not None for c in instance.columns):
        raise ValueError(
            f"{instance.name}: the query functions return every captured column; read a table "
            "with column rules with read_changes"
        )
    if row_filter not in _ROW_FILTERS[kind]:
        raise ValueError(f"row_filter for {kind} changes is one of {_ROW_FILTERS[kind]}")
    if kind == "net" and not instance.supports_net_changes:
        raise ValueError(f"capture instance {instance.name!r} was created without net changes")
    sql = ALL_CHANGES_QUERY.format(
        function=query_function(kind, instance.name), row_filter=row_filter
    )
    try:
        cursor = execute(
            conn,
            sql,
            lsn_range.first.raw,
            lsn_range.hi.raw,
            capture_instance=instance.name,
            requested=lsn_range,
        )
    except LsnNotAvailable as exc:
        raise _with_interval(conn, instance.name, lsn_range) from exc
    names = [d[0] for d in cursor.description or ()]
    metadata = {f.name: f for f in METADATA_FIELDS}
    prefix = [metadata[n] for n in names if n.startswith("__$")]
    schema = arrow_schema(instance.columns, prefix=prefix, all_nullable=True)
    yield from read_record_batches(
        cursor, schema, batch_rows, capture_instance=instance.name, requested=lsn_range
    )


def _with_interval(conn: DbapiConnection, instance: str, lsn_range: LsnRange) -> LsnNotAvailable:
    """Error 313 says nothing about the interval; look it up for the message."""
    minimum: Lsn | None
    maximum: Lsn | None
    try:
        minimum, maximum = get_min_lsn(conn, instance), get_max_lsn(conn)
    except Exception:  # the 313 is what matters; the interval is a courtesy
        minimum = maximum = None
    return LsnNotAvailable(
        instance,
        lsn_range,
        minimum,
        maximum,
        native_error=313,
        reason="SQL Server refused the range (error 313)",
    )
