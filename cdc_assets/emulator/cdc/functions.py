"""SQLite text for the CDC functions, following SQL Server's documented behaviour.

Scalar functions (``sys.fn_cdc_*``) become sub-queries over the CDC metadata tables; the query
functions ``cdc.fn_cdc_get_all_changes_<ci>`` and ``cdc.fn_cdc_get_net_changes_<ci>`` become
derived tables over the change table.

Validity interval: both query functions raise error 313 when ``from_lsn`` is below the capture
instance's ``start_lsn`` (or that is not established yet), ``to_lsn`` is above
``sys.fn_cdc_get_max_lsn()``, ``from_lsn > to_lsn``, an argument is NULL, or the row filter option
is unknown. The check is a function evaluated in a ``MATERIALIZED`` CTE that is the outer loop of
a ``CROSS JOIN`` with the change table, so it runs exactly once, even when the range holds no
rows, and it reads the same snapshot as the rows it guards: a cleanup cannot slip in between.

Net changes (``all``, ``all with mask``, ``all with merge``): one row per key of the capture
instance's index, carrying the last change in the range; the first change decides whether the row
existed before the range (first ``__$operation`` 1 or 4) or not (2):

==========================  ======================  ==========================
existed before / after      ``all`` / with mask      ``all with merge``
==========================  ======================  ==========================
no  / yes                   2 (insert)              5
yes / yes                   4 (update)              5
yes / no                    1 (delete)              1
no  / no                    no row                  no row
==========================  ======================  ==========================

``__$update_mask`` is NULL except for ``all with mask`` rows with operation 4, where it is the OR
of the masks of the key's changes in the range.
"""

from __future__ import annotations

from cdc_assets.lsn import change_order

from ..catalog.catalog import CaptureInstance, EmulatedTable
from ..catalog.storage import quote
from ..values.types import INT, LSN, VARBINARY128, SqlType

ALL_CHANGES = "fn_cdc_get_all_changes_"
NET_CHANGES = "fn_cdc_get_net_changes_"
ALL_OPTIONS = ("all", "all update old")
NET_OPTIONS = ("all", "all with mask", "all with merge")
ZERO_LSN_SQL = "X'00000000000000000000'"

MAX_LSN_SQL = 'SELECT MAX("start_lsn") FROM "cdc.lsn_time_mapping"'


def min_lsn_sql(capture_instance: str) -> str:
    """``sys.fn_cdc_get_min_lsn``: the instance's start_lsn, 0x00… if unknown or not set."""
    return (
        'COALESCE((SELECT "start_lsn" FROM "cdc.change_tables" '
        f'WHERE "capture_instance" = {capture_instance}), {ZERO_LSN_SQL})'
    )


def map_lsn_to_time_sql(lsn: str) -> str:
    """``sys.fn_cdc_map_lsn_to_time``: commit time of the transaction at (or before) the LSN."""
    return f'SELECT MAX("tran_end_time") FROM "cdc.lsn_time_mapping" WHERE "start_lsn" <= {lsn}'


_TIME_TO_LSN = {
    "largest less than": ("MAX", "<"),
    "largest less than or equal": ("MAX", "<="),
    "smallest greater than": ("MIN", ">"),
    "smallest greater than or equal": ("MIN", ">="),
}


def map_time_to_lsn_sql(operator: str | None, operator_sql: str, time: str) -> str:
    """``sys.fn_cdc_map_time_to_lsn``: the LSN whose tran_end_time satisfies the relation."""

    def branch(key: str) -> str:
        agg, op = _TIME_TO_LSN[key]
        return (
            f'(SELECT {agg}("start_lsn") FROM "cdc.lsn_time_mapping" '
            f'WHERE "tran_end_time" {op} {time})'
        )

    if operator is not None:
        return branch(operator)
    cases = " ".join(f"WHEN '{key}' THEN {branch(key)}" for key in _TIME_TO_LSN)
    return f"CASE lower(trim({operator_sql})) {cases} END"


def column_ordinal_sql(capture_instance: str, column: str) -> str:
    """``sys.fn_cdc_get_column_ordinal``: ordinal of a captured column in the change table."""
    return (
        'SELECT cc."column_ordinal" FROM "cdc.captured_columns" AS cc '
        'JOIN "cdc.change_tables" AS ct ON ct."object_id" = cc."object_id" '
        f'WHERE ct."capture_instance" = {capture_instance} AND cc."column_name" = {column}'
    )


def has_column_changed_sql(capture_instance: str, column: str, mask: str) -> str:
    return f"_emu_bit_set({mask}, ({column_ordinal_sql(capture_instance, column)}))"


def change_function_columns(
    kind: str, instance: CaptureInstance, change_table: EmulatedTable
) -> list[tuple[str, SqlType | None]]:
    """Output columns of a query function, in SQL Server's order."""
    head: list[tuple[str, SqlType | None]]
    if kind == "all":
        head = [
            ("__$start_lsn", LSN),
            ("__$seqval", LSN),
            ("__$operation", INT),
            ("__$update_mask", VARBINARY128),
        ]
    else:
        head = [("__$start_lsn", LSN), ("__$operation", INT), ("__$update_mask", VARBINARY128)]
    for name in instance.captured:
        column = change_table.column(name)
        head.append((name, column.type if column else None))
    return head


def _check_sql(kind: str, instance: CaptureInstance, lo: str, hi: str, option: str) -> str:
    label = "cdc." + (ALL_CHANGES if kind == "all" else NET_CHANGES)
    return (
        f"_emu_check_range({lo}, {hi}, "
        f'(SELECT "start_lsn" FROM "cdc.change_tables" WHERE "object_id" = {instance.object_id}), '
        f"({MAX_LSN_SQL}), '{label}', {option}, '{kind}')"
    )


def all_changes_sql(instance: CaptureInstance, lo: str, hi: str, option: str) -> str:
    """``cdc.fn_cdc_get_all_changes_<ci>(lo, hi, option)`` as a SELECT."""
    ct = quote(instance.change_table)
    cols = ", ".join(f"ct.{quote(c)} AS {quote(c)}" for c in instance.captured)
    cols = (", " + cols) if cols else ""
    return (
        f'WITH "__emu_chk" AS MATERIALIZED (SELECT {_check_sql("all", instance, lo, hi, option)} '
        'AS "ok") '
        'SELECT ct."__$start_lsn" AS "__$start_lsn", ct."__$seqval" AS "__$seqval", '
        'ct."__$operation" AS "__$operation", ct."__$update_mask" AS "__$update_mask"'
        f"{cols} "
        f'FROM "__emu_chk" CROSS JOIN {ct} AS ct '
        f'WHERE ct."__$start_lsn" >= {lo} AND ct."__$start_lsn" <= {hi} '
        f"AND (ct.\"__$operation\" <> 3 OR lower(trim({option})) = 'all update old') "
        f"ORDER BY {change_order(lambda c: 'ct.' + quote(c))}"
    )


def net_changes_sql(instance: CaptureInstance, lo: str, hi: str, option: str) -> str:
    """``cdc.fn_cdc_get_net_changes_<ci>(lo, hi, option)`` as a SELECT (see module doc)."""
    ct = quote(instance.change_table)
    keys = [quote(k) for k in instance.key_columns]
    partition = ", ".join(f"ct.{k}" for k in keys)
    order = change_order(lambda c: "ct." + quote(c))
    order_desc = change_order(lambda c: "ct." + quote(c), descending=True)
    join_first = " AND ".join(f"f.{k} = l.{k}" for k in keys)
    join_mask = " AND ".join(f"m.{k} = l.{k}" for k in keys)
    merge = f"lower(trim({option})) = 'all with merge'"
    with_mask = f"lower(trim({option})) = 'all with mask'"
    cols = ", ".join(f"l.{quote(c)} AS {quote(c)}" for c in instance.captured)
    cols = (", " + cols) if cols else ""
    return (
        f'WITH "__emu_chk" AS MATERIALIZED (SELECT {_check_sql("net", instance, lo, hi, option)} '
        'AS "ok"), '
        '"__emu_r" AS (SELECT ct.*, '
        f'ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order}) AS "__emu_first", '
        f'ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY {order_desc}) AS "__emu_last" '
        f'FROM "__emu_chk" CROSS JOIN {ct} AS ct '
        f'WHERE ct."__$start_lsn" >= {lo} AND ct."__$start_lsn" <= {hi} '
        'AND ct."__$operation" <> 3), '
        f'"__emu_m" AS (SELECT {", ".join(keys)}, _emu_mask_or("__$update_mask") AS "mask" '
        f'FROM "__emu_r" GROUP BY {", ".join(keys)}) '
        'SELECT l."__$start_lsn" AS "__$start_lsn", '
        f'CASE WHEN f."__$operation" = 2 THEN (CASE WHEN {merge} THEN 5 ELSE 2 END) '
        'WHEN l."__$operation" = 1 THEN 1 '
        f'ELSE (CASE WHEN {merge} THEN 5 ELSE 4 END) END AS "__$operation", '
        f'CASE WHEN {with_mask} AND f."__$operation" <> 2 AND l."__$operation" <> 1 '
        'THEN m."mask" END AS "__$update_mask"'
        f"{cols} "
        'FROM "__emu_r" AS l '
        f'JOIN "__emu_r" AS f ON {join_first} AND f."__emu_first" = 1 '
        f'JOIN "__emu_m" AS m ON {join_mask} '
        'WHERE l."__emu_last" = 1 AND NOT (f."__$operation" = 2 AND l."__$operation" = 1) '
        f"ORDER BY {change_order(lambda c: 'l.' + quote(c))}"
    )
