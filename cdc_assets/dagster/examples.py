"""Example assets built on the mirrors, as a user of cdc_assets writes them (``examples`` in the
config; the demo turns on ``daily_orders``).

``analytics/<source>/daily_orders`` reads the current mirror of ``dbo.orders`` through the IO
manager (a mirror input is its current state, whatever partition the mirror was last moved by)
and writes a daily aggregate with Spark. Its column lineage points at the mirror's columns, whose
own lineage points at the SQL Server table's: the UI follows a revenue figure back to
``[dbo].[orders].[total]``.
"""

import logging

from dagster import (
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    Output,
    asset,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from cdc_assets.config import ConfigError
from cdc_assets.spark.store_writes import FrameWrite

from .sync.io_manager import AssetWrite
from .sync.metadata import COLUMN_LINEAGE, asset_tags, column_lineage
from .sync.names import IO_MANAGER
from .sync.source import Source

log = logging.getLogger(__name__)

ORDERS = ("dbo", "orders")
# The aggregate follows the mirror at most once a minute (each run is a Spark job), and only
# after the mirror moved: never "never materialized" in a running demo, never a run per range.
DAILY_ORDERS_CRON = "* * * * *"
EXAMPLES_SENSOR = "examples_automation"
# output column -> the mirror column it is computed from
DAILY_ORDERS_LINEAGE = {
    "order_date": "ordered_at",
    "orders": "order_id",
    "customers": "customer_id",
    "revenue": "total",
}


def daily_orders_key(source: str) -> AssetKey:
    return AssetKey(["analytics", source, "daily_orders"])


def build_daily_orders(source: Source) -> AssetsDefinition | None:
    """The daily aggregate of ``source``'s ``dbo.orders`` mirror; None without that table."""
    table = next(
        (t for t in source.tables if (t.schema.lower(), t.name.lower()) == ORDERS),
        None,
    )
    if table is None:
        return None

    @asset(
        key=daily_orders_key(source.name),
        ins={"orders": AssetIn(table.mirror_key)},
        io_manager_key=IO_MANAGER,
        group_name="analytics",
        kinds={"spark", "delta"},
        owners=list(source.config.owners),
        tags=asset_tags(source.config, table.schema),
        description=f"Orders per day of source '{source.name}' (from the mirror of "
        f"{table.qualified_name}): number of orders, distinct customers and revenue (sum of "
        "total). An example of a downstream asset: it follows the mirror once a minute (its "
        f"automation condition, evaluated by the {EXAMPLES_SENSOR} sensor), and you can "
        "materialize it whenever you want the aggregate as of the mirror's current LSN.",
        automation_condition=AutomationCondition.on_cron(DAILY_ORDERS_CRON),
    )
    def daily_orders(context: AssetExecutionContext, orders: DataFrame) -> Output[AssetWrite]:
        daily = (
            orders.groupBy(F.to_date("ordered_at").alias("order_date"))
            .agg(
                F.count("order_id").alias("orders"),
                F.countDistinct("customer_id").alias("customers"),
                F.sum("total").alias("revenue"),
            )
            .orderBy("order_date")
            .coalesce(1)
        )

        def summarize(written: DataFrame) -> dict[str, object]:
            first = written.agg(F.min("order_date"), F.max("order_date"), F.count("*")).first()
            return {
                "days": int(first[2]),
                "first_day": str(first[0]),
                "last_day": str(first[1]),
            }

        def metadata(p: dict[str, object]) -> dict[str, object]:
            return {
                "dagster/row_count": p["days"],
                "days": f"{p['first_day']} .. {p['last_day']}",
                COLUMN_LINEAGE: column_lineage(
                    list(DAILY_ORDERS_LINEAGE), table.mirror_key, DAILY_ORDERS_LINEAGE
                ),
            }

        context.log.info(f"aggregating the mirror of {table.qualified_name} by day")
        return Output(AssetWrite(FrameWrite(daily, summarize), metadata))

    return daily_orders


def examples_sensor(examples: list[AssetsDefinition]) -> AutomationConditionSensorDefinition:
    """Evaluates the examples' automation conditions; running from the start, like the sync
    sensors (Dagster's own default sensor for automation conditions starts stopped)."""
    return AutomationConditionSensorDefinition(
        EXAMPLES_SENSOR,
        target=examples,
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=15,
        description="Materializes the example assets built on the mirrors when their "
        "automation conditions say so (daily_orders: once a minute after its mirror moved).",
    )


def _lower(table: tuple[str, str]) -> tuple[str, str]:
    return (table[0].lower(), table[1].lower())


def build_examples(names: tuple[str, ...], sources: list[Source]) -> list[AssetsDefinition]:
    """The configured examples for every source that has the tables they need."""
    built: list[AssetsDefinition] = []
    if "daily_orders" in names:
        built.extend(a for s in sources if (a := build_daily_orders(s)) is not None)
        waiting = [s.name for s in sources if ORDERS in {_lower(t) for t in s.unscanned}]
        if not built and waiting:  # left out with its table, as the warning before said
            log.warning(
                "examples: daily_orders is left out until the next reload, with dbo.orders of "
                "source %s (not yet scanned by the capture job)",
                ", ".join(repr(name) for name in waiting),
            )
        elif not built:
            raise ConfigError(
                "examples: daily_orders aggregates a captured table dbo.orders, and no "
                f"source ({', '.join(s.config.name for s in sources)}) has one; remove it from "
                "'examples' or capture dbo.orders"
            )
    return built
