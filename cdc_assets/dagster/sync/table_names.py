"""Each change log, mirror and history by name (:mod:`cdc_assets.spark.table_names`).

The name follows the asset key: ``<catalog>.cdc_<source>.<schema>_<last key part>``, e.g.
``cdc/demo/dbo/orders_changes`` is ``cdc_demo.dbo_orders_changes``, ``mirror/demo/dbo/
order_lines_<hash>_mirror`` is ``cdc_demo.dbo_order_lines_<hash>_mirror`` (the source's
``catalog`` settings choose the catalog and the database). A step registers a table when it
creates or rebuilds it from a snapshot, the only writes that change its columns: a change log
with its ``snapshot`` partition, a mirror or a history when built on a new snapshot. A range's
write registers nothing (no catalog call, no Spark job). A snapshot run also drops the names of
tables the source no longer has. Registering is best effort: a catalog that refuses it costs
the table its name (a warning in the run's log), never its sync.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from dagster import AssetKey
from pyspark.sql import SparkSession

from cdc_assets.config import SourceConfig
from cdc_assets.spark.table_names import (
    METASTORE_FOLDER,
    TableName,
    drop_views_except,
    register_view,
)

from .io_manager import describe_error
from .source import Source
from .table_pool import LogLine

STAGES = ("cdc", "mirror", "history")


def database_of(config: SourceConfig) -> str:
    return config.catalog.database or f"cdc_{config.name}"


def table_name(config: SourceConfig, key: AssetKey) -> TableName | None:
    """The name of the table of ``key`` (a change log, mirror or history of the source of
    ``config``); None when the source registers no names."""
    if not config.catalog.enabled or len(key.path) != 4 or key.path[0] not in STAGES:
        return None
    _, _, schema, last = key.path
    return TableName(config.catalog.name, database_of(config), f"{schema}_{last}".lower())


def register_table(
    spark: SparkSession, source: Source, key: AssetKey, *, change_log: bool = False
) -> Iterator[LogLine]:
    """Register the table of ``key`` by name (see the module); one log line saying so."""
    name = table_name(source.config, key)
    if name is None:
        return
    location = source.store.location(key.path)
    try:
        register_view(
            spark,
            name,
            location,
            change_log=change_log,
            database_location=source.store.location(
                [METASTORE_FOLDER, "databases", f"{name.database}.db"]
            ),
            comment=f"{key.to_user_string()} (cdc_assets), stored at {location}",
        )
    except Exception as exc:
        yield LogLine(
            "warning",
            f"{key.to_user_string()}: not registered as {name} ({describe_error(exc)}); "
            f"read it by path: delta.`{location}`",
        )
        return
    yield LogLine("info", f"{key.to_user_string()} is {name} by name")


def drop_gone_tables(spark: SparkSession, source: Source, log: Callable[[str], None]) -> None:
    """Drop the names of change logs, mirrors and histories the source no longer has."""
    config = source.config
    if not config.catalog.enabled:
        return
    keys = [t.change_log_key for t in source.tables] + [t.mirror_key for t in source.tables]
    keys += [t.history_key for t in source.history_tables]
    keep = [n.table for k in keys if (n := table_name(config, k)) is not None]
    try:
        gone = drop_views_except(spark, config.catalog.name, database_of(config), keep)
    except Exception as exc:
        log(f"the names of tables source '{config.name}' no longer has stay: {describe_error(exc)}")
        return
    if gone:
        log(f"dropped the names of tables source '{config.name}' no longer has: {', '.join(gone)}")
