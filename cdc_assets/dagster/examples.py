"""Example assets built on the mirrors, as a user of cdc_assets writes them (``examples`` in the
config; the demo turns on ``daily_orders``).

``analytics/<source>/daily_orders`` is a daily aggregate of the mirror of ``dbo.orders``,
kept incrementally: its input reads the mirror's changes since the version its last run consumed
(``cdc_assets/read: changes``, :mod:`.sync.incremental_inputs`), and a run recomputes only the
days those changes touch (the day of each row before and after it changed), from the mirror as of
the version the changes end at, and replaces those days' rows (Delta's ``replaceWhere``). A first
run, or one after a re-snapshot rebuilt the mirror or after the versions it needs were vacuumed,
aggregates the whole mirror. Recomputing a day from the mirror (rather than adding the changes to
it) is what makes a re-executed run exact: the same day recomputed twice is the same day.
Its column lineage points at the mirror's columns, whose own lineage points at the SQL Server
table's: the UI follows a revenue figure back to ``[dbo].[orders].[total]``.
"""

import logging

import pyarrow as pa
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

from cdc_assets.config import ConfigError
from cdc_assets.spark.change_feed import TableChanges
from cdc_assets.spark.replace_rows import RowsReplaced
from cdc_assets.spark.store_writes import FrameWrite

from .daily_totals import daily_totals, day_range, recompute_changed_days
from .sync.incremental_inputs import CHANGES, READ
from .sync.io_manager import AssetWrite, MetadataOf
from .sync.metadata import COLUMN_LINEAGE, asset_tags, column_lineage
from .sync.names import IO_MANAGER
from .sync.source import Source

log = logging.getLogger(__name__)

ORDERS = ("dbo", "orders")
# The aggregate follows the mirror at most once a minute (each run is a Spark job), and only
# after the mirror moved: never "never materialized" in a running demo, never a run per range.
DAILY_ORDERS_CRON = "* * * * *"
# The dbt models every five minutes: a build (a dbt process, its Spark Connect session, the
# models' column metadata) took ~50 s of a core under the soak, so once a minute kept one of a
# 2-core machine's cores busy beside the sync.
DBT_MODELS_CRON = "*/5 * * * *"
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
        ins={"orders": AssetIn(table.mirror_key, metadata={READ: CHANGES})},
        io_manager_key=IO_MANAGER,
        group_name="analytics",
        kinds={"spark", "delta"},
        owners=list(source.config.owners),
        tags=asset_tags(source.config, table.schema),
        description=f"Orders per day of source '{source.name}' (from the mirror of "
        f"{table.qualified_name}): number of orders, distinct customers and revenue (sum of "
        "total). An example of a downstream asset: it follows the mirror once a minute (its "
        f"automation condition, evaluated by the {EXAMPLES_SENSOR} sensor), and you can "
        "materialize it whenever you want the aggregate as of the mirror's current LSN. "
        "Incremental: each run reads the mirror's changes since the version the last one "
        "consumed and recomputes only the days they touch.",
        automation_condition=AutomationCondition.on_cron(DAILY_ORDERS_CRON),
    )
    def daily_orders(
        context: AssetExecutionContext, orders: TableChanges
    ) -> Output[AssetWrite | None]:
        def summarize(written: DataFrame | pa.Table) -> dict[str, object]:
            first, last, days = day_range(written)
            return {"days": days, "first_day": str(first), "last_day": str(last)}

        def metadata_of(recomputed: str) -> MetadataOf:
            def metadata(p: dict[str, object]) -> dict[str, object]:
                return {
                    "dagster/row_count": p["days"],
                    "days": f"{p['first_day']} .. {p['last_day']}",
                    "days_recomputed": recomputed,
                    COLUMN_LINEAGE: column_lineage(
                        list(DAILY_ORDERS_LINEAGE), table.mirror_key, DAILY_ORDERS_LINEAGE
                    ),
                }

            return metadata

        if orders.full:
            context.log.info(f"aggregating the mirror of {table.qualified_name} by day")
            daily = daily_totals(orders.rows).orderBy("order_date").coalesce(1)
            return Output(AssetWrite(FrameWrite(daily, summarize), metadata_of("all")))
        if orders.empty:
            context.log.info(f"no order changed since version {orders.read.after}")
            return Output(None, metadata={"days_recomputed": 0})
        recomputed = recompute_changed_days(orders)
        if recomputed is None:
            context.log.info(f"no order changed since version {orders.read.after}")
            return Output(None, metadata={"days_recomputed": 0})
        days, rows = recomputed
        where = "in the driver" if isinstance(rows, pa.Table) else "with Spark"
        context.log.info(
            f"recomputed {len(days)} day(s) changed since version {orders.read.after} {where}"
        )
        write = RowsReplaced(rows, "order_date", days, summarize)
        return Output(AssetWrite(write, metadata_of(str(len(days)))))

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
        "automation conditions say so, after their mirrors moved (daily_orders: once a "
        "minute; the dbt models: every five minutes).",
    )


def _lower(table: tuple[str, str]) -> tuple[str, str]:
    return (table[0].lower(), table[1].lower())


def build_examples(
    names: tuple[str, ...], sources: list[Source], spark_remote: str | None = None
) -> list[AssetsDefinition]:
    """The configured examples for every source that has the tables they need (the dbt
    project's models for the first such source: one dbt project writes one set of tables)."""
    built: list[AssetsDefinition] = []
    listed = ", ".join(s.config.name for s in sources)
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
                f"source ({listed}) has one; remove it from 'examples' or capture dbo.orders"
            )
    if "dbt" in names:
        from .dbt_models import build_dbt_models, has_tables  # dagster-dbt only when asked

        source = next((s for s in sources if has_tables(s)), None)
        if source is None:
            raise ConfigError(
                "examples: dbt models dbo.orders, dbo.[order lines] and dbo.customers, and no "
                f"source ({listed}) captures all three; remove it from 'examples'"
            )
        if spark_remote is None:
            raise ConfigError(
                "examples: dbt runs its models on the Spark Connect server the runs attach to "
                "(dbt-spark's session method, where the mirrors are registered by name): set "
                "spark.remote, or remove dbt from 'examples'"
            )
        built.append(build_dbt_models(source, spark_remote, DBT_MODELS_CRON))
    return built
