"""What a person reads in the UI, checked on the real definitions and the real materializations:
owners and tags, the schema with SQL Server and Spark types, column lineage from the mirror (and
the downstream example) back to the source table, the mirrors' freshness policy, the commit-time
range and lag of every range, and the example daily aggregate against the source."""

import datetime as dt
from decimal import Decimal

import pytest
from dagster import (
    AssetKey,
    AssetSelection,
    FreshnessPolicy,
    TableColumnLineage,
    TableSchema,
    materialize,
)
from dagster._core.definitions.freshness import TimeWindowFreshnessPolicy
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdc_assets.config import ConfigError, parse_config
from cdc_assets.dagster.examples import DAILY_ORDERS_LINEAGE, daily_orders_key
from cdc_assets.dagster.sync.names import SOURCE_TAG
from cdc_assets.workload import DEMO_TABLES

from .conftest import QUIET, SyncHarness, make_harness

OWNERS = ("team:data-platform", "dba@example.com")


@pytest.fixture
def ui_harness(tmp_path, spark: SparkSession, instance) -> SyncHarness:
    return make_harness(tmp_path, spark, instance, owners=OWNERS, examples=("daily_orders",))


def _latest_metadata(harness: SyncHarness, key: AssetKey) -> dict:
    event = harness.instance.get_latest_materialization_event(key)
    assert event is not None, f"{key.to_user_string()} was never materialized"
    return dict(event.asset_materialization.metadata)


def test_definitions_carry_owners_tags_schema_and_freshness(ui_harness: SyncHarness) -> None:
    graph = ui_harness.defs.resolve_asset_graph()
    orders = next(t for t in ui_harness.source.tables if t.name == "orders")
    for key in (orders.source_key, orders.change_log_key, orders.mirror_key):
        node = graph.get(key)
        assert list(node.owners) == list(OWNERS), key
        assert node.tags[SOURCE_TAG] == "shop" and node.tags["sqlserver/schema"] == "dbo"
    schema = graph.get(orders.mirror_key).metadata["dagster/column_schema"]
    assert isinstance(schema, TableSchema)
    by_name = {c.name: c for c in schema.columns}
    assert by_name["total"].type == "decimal(19,4)"
    assert "Spark decimal(19,4)" in (by_name["total"].description or "")
    assert by_name["order_id"].description.startswith("primary key")
    assert "Spark timestamp_ntz" in (by_name["ordered_at"].description or "")
    assert by_name["confirmed_at"].type == "datetimeoffset(3)"

    policy = graph.get(orders.mirror_key).freshness_policy
    assert isinstance(policy, TimeWindowFreshnessPolicy)
    # sensor interval 5 s, no min range interval: 30 cycles are 150 s, so the 15-minute floor
    assert policy.fail_window.to_timedelta() == dt.timedelta(minutes=15)
    assert policy.warn_window is not None
    assert policy.warn_window.to_timedelta() == dt.timedelta(minutes=5)
    # change logs move only with their own partitions: no freshness policy there
    assert graph.get(orders.change_log_key).freshness_policy is None


def test_freshness_windows_follow_the_sync_policy(tmp_path) -> None:
    def policy(sync: dict) -> FreshnessPolicy:
        config = parse_config(
            {
                "sources": [
                    {"name": "s", "connection": {"emulator": {"path": "x.db"}}, "sync": sync}
                ],
                "storage": {"base_path": "st"},
            },
            base_dir=tmp_path,
            origin="t",
        )
        return config.sources[0].sync.freshness_windows()

    assert policy({}) == (300.0, 900.0)
    assert policy({"sensor_interval_seconds": 60, "min_range_interval_seconds": 60}) == (
        1200.0,
        3600.0,
    )
    assert policy({"overdue_after_minutes": 3}) == (60.0, 180.0)


def test_bad_owner_and_example_without_orders_are_refused(tmp_path, spark, instance) -> None:
    with pytest.raises(ConfigError, match="neither an e-mail address nor 'team:<name>'"):
        parse_config(
            {
                "sources": [
                    {
                        "name": "s",
                        "connection": {"emulator": {"path": "x.db"}},
                        "owners": ["data platform"],
                    }
                ],
                "storage": {"base_path": "st"},
            },
            base_dir=tmp_path,
            origin="t",
        )
    customers_only = tuple(t for t in DEMO_TABLES if t.name == "customers")
    with pytest.raises(ConfigError, match=r"daily_orders aggregates a captured table dbo\.orders"):
        make_harness(tmp_path, spark, instance, tables=customers_only, examples=("daily_orders",))


def test_materializations_show_lineage_commit_times_lag_and_the_daily_aggregate(
    ui_harness: SyncHarness,
) -> None:
    h = ui_harness
    h.sync()  # the snapshot
    for _ in range(12):
        h.workload.step()
    h.capture()
    assert h.sync() == 1  # one range

    orders = next(t for t in h.source.tables if t.name == "orders")
    range_meta = _latest_metadata(h, orders.change_log_key)
    first, last = range_meta["commit_time_range"].value.split(" .. ")
    assert dt.datetime.fromisoformat(first) <= dt.datetime.fromisoformat(last)
    assert range_meta["lag_seconds"].value >= 0
    lineage = range_meta["dagster/column_lineage"].value
    assert isinstance(lineage, TableColumnLineage)
    assert set(lineage.deps_by_column) == set(orders.instance.column_names)

    mirror_meta = _latest_metadata(h, orders.mirror_key)
    assert mirror_meta["as_of_commit_time"].value == last
    assert mirror_meta["lag_seconds"].value >= range_meta["lag_seconds"].value
    lineage = mirror_meta["dagster/column_lineage"].value
    for column in orders.instance.column_names:
        (dep,) = lineage.deps_by_column[column]
        assert (dep.asset_key, dep.column_name) == (orders.source_key, column)

    # the downstream example, materialized as a user would (from the definitions)
    result = materialize(
        list(h.defs.assets or []),
        instance=h.instance,
        resources=dict(h.defs.resources or {}),
        selection=AssetSelection.assets(daily_orders_key("shop")),
        run_config=QUIET,
    )
    assert result.success
    daily_meta = _latest_metadata(h, daily_orders_key("shop"))
    lineage = daily_meta["dagster/column_lineage"].value
    for column, upstream_column in DAILY_ORDERS_LINEAGE.items():
        (dep,) = lineage.deps_by_column[column]
        assert (dep.asset_key, dep.column_name) == (orders.mirror_key, upstream_column)

    written = h.source.store.read(h.spark, daily_orders_key("shop").path, None)
    expected = (
        h.source_rows(orders)
        .groupBy(F.to_date("ordered_at").alias("order_date"))
        .agg(
            F.count("*").alias("orders"),
            F.countDistinct("customer_id").alias("customers"),
            F.sum("total").alias("revenue"),
        )
    )
    got = {r["order_date"]: (r["orders"], r["customers"], r["revenue"]) for r in written.collect()}
    want = {
        r["order_date"]: (r["orders"], r["customers"], r["revenue"]) for r in expected.collect()
    }
    assert got == want and got
    assert daily_meta["dagster/row_count"].value == len(want)
    assert all(isinstance(v[2], Decimal) for v in got.values())
