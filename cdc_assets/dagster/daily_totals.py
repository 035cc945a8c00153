"""The example ``daily_orders``'s computation: orders, distinct customers and revenue per day of
the mirror of ``dbo.orders``, computed whole (Spark) or for the days some changes touch.

The days a change touches are each changed row's day before and after the change (an update's
pre- and post-image, a delete's, an insert's). Those days are recomputed from the mirror as of
the version the changes end at: in the driver (Arrow) when the changes and those days' rows
are few and on a local file system (:meth:`.TableChanges.feed_in_driver`,
:meth:`.TableChanges.rows_of_days_in_driver`: no Spark job), else with Spark, both giving the
rows and types of :func:`daily_totals` (``count`` and ``count(DISTINCT)`` as ``bigint``, the
sum of a ``decimal(p, s)`` as ``decimal(p + 10, s)``; nulls neither counted nor summed).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_assets.spark.change_feed import TableChanges

COLUMNS = ("order_id", "customer_id", "ordered_at", "total")  # the mirror's columns it reads
Day = dt.date | None


def daily_totals(orders: DataFrame) -> DataFrame:
    """Orders, distinct customers and revenue per day of ``orders`` (rows of the mirror)."""
    return orders.groupBy(F.to_date("ordered_at").alias("order_date")).agg(
        F.count("order_id").alias("orders"),
        F.countDistinct("customer_id").alias("customers"),
        F.sum("total").alias("revenue"),
    )


def daily_totals_in_driver(orders: pa.Table) -> pa.Table:
    """:func:`daily_totals` of rows held in the driver, with the types Spark gives them."""
    days = pc.cast(orders.column("ordered_at"), pa.date32())
    grouped = (
        pa.table(
            {
                "order_date": days,
                "order_id": orders.column("order_id"),
                "customer_id": orders.column("customer_id"),
                "total": orders.column("total"),
            }
        )
        .group_by("order_date")
        .aggregate([("order_id", "count"), ("customer_id", "count_distinct"), ("total", "sum")])
    )
    total = orders.schema.field("total").type
    revenue = pa.decimal128(min(38, total.precision + 10), total.scale)
    return pa.table(
        {
            "order_date": grouped.column("order_date"),
            "orders": grouped.column("order_id_count").cast(pa.int64()),
            "customers": grouped.column("customer_id_count_distinct").cast(pa.int64()),
            "revenue": grouped.column("total_sum").cast(revenue),
        }
    )


def recompute_changed_days(changes: TableChanges) -> tuple[list[Day], DataFrame | pa.Table] | None:
    """The days ``changes`` touch and their totals recomputed from the mirror at
    ``changes.read.to`` (Arrow in the driver, or a Spark frame); None when no day changed."""
    feed = changes.feed_in_driver(COLUMNS)
    if feed is not None:
        found = pc.unique(pc.cast(feed.column("ordered_at"), pa.date32())).to_pylist()
        days = sorted(found, key=_day_order)
        if not days:
            return None
        rows = changes.rows_of_days_in_driver(COLUMNS, "ordered_at", days)
        if rows is not None:
            return days, daily_totals_in_driver(rows)
    else:
        found = changes.rows.select(F.to_date("ordered_at").alias("day")).distinct().collect()
        days = sorted((r["day"] for r in found), key=_day_order)
        if not days:
            return None
    return days, daily_totals(orders_of_days(changes.table(), days)).coalesce(1)


def orders_of_days(mirror: DataFrame, days: list[Day]) -> DataFrame:
    """The mirror's rows of ``days``; bounded by the first and last day's timestamps too, which
    Delta's file statistics prune on (a mirror clustered by an increasing key holds a day's
    orders in few files)."""
    dates = [d for d in days if d is not None]
    wanted = F.to_date("ordered_at").isin(dates) if dates else F.lit(False)
    if len(dates) < len(days):
        wanted = wanted | F.col("ordered_at").isNull()
    elif dates:
        kind = mirror.schema["ordered_at"].dataType
        low = F.lit(dates[0].isoformat()).cast(kind)
        high = F.lit((dates[-1] + dt.timedelta(days=1)).isoformat()).cast(kind)
        wanted = wanted & (F.col("ordered_at") >= low) & (F.col("ordered_at") < high)
    return mirror.where(wanted)


def day_range(daily: DataFrame | pa.Table) -> tuple[Day, Day, int]:
    """The first and last ``order_date`` of the aggregate and its number of days."""
    if isinstance(daily, pa.Table):
        dates = daily.column("order_date")
        low, high = pc.min_max(dates).values()
        return low.as_py(), high.as_py(), daily.num_rows
    first = daily.agg(F.min("order_date"), F.max("order_date"), F.count("*")).first()
    return first[0], first[1], int(first[2])


def _day_order(day: Day) -> tuple[bool, dt.date]:
    return day is not None, day or dt.date.min
