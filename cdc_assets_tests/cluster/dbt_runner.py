"""The dbt example built through Dagster on a Spark Connect server, in a process of its own (this
test session holds a classic Spark session; :mod:`.test_dbt_models` runs this file).

The demo tables' snapshot and a range through the project's definitions (``examples: [dbt]``,
``spark.remote``), then the dbt models materialized as the examples' sensor would (dbt-spark's
session method on the same server, reading the mirrors by name). It prints one line
``RESULT <json>``: the models' rows and the same figures computed from the source tables, the
models' upstream asset keys, their column lineage, and the tables found by name.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

RESULT_PREFIX = "RESULT "
TABLES = ("customers", "products", "orders", "order lines")


def _source_figures(db: Path) -> dict[str, list[list[str]]]:
    """order_totals and customer_revenue computed from the source tables themselves."""
    from cdc_assets import emulator

    conn = emulator.connect(str(db), autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT [customer_id], [name], [country] FROM [dbo].[customers]")
        customers = cursor.fetchall()
        cursor.execute("SELECT [order_id], [customer_id], [total] FROM [dbo].[orders]")
        orders = cursor.fetchall()
        cursor.execute("SELECT [order_id], [quantity], [unit price] FROM [dbo].[order lines]")
        lines = cursor.fetchall()
    finally:
        conn.close()
    per_order: dict[int, list[Any]] = defaultdict(lambda: [0, 0, Decimal(0)])
    for order_id, quantity, price in lines:
        figures = per_order[order_id]
        figures[0] += 1
        figures[1] += quantity
        figures[2] += quantity * price
    order_totals = [
        [o, c, t, *per_order[o]] if o in per_order else [o, c, t, 0, 0, Decimal(0)]
        for o, c, t in orders
    ]
    per_customer: dict[int, list[Any]] = defaultdict(lambda: [0, 0, Decimal(0)])
    for _, customer_id, total, _, items, _ in order_totals:
        figures = per_customer[customer_id]
        figures[0] += 1
        figures[1] += items
        figures[2] += total
    revenue = [[c, n, k, *per_customer.get(c, [0, 0, Decimal(0)])] for c, n, k in customers]
    return {"order_totals": _text(order_totals), "customer_revenue": _text(revenue)}


def _text(rows: list[Any]) -> list[list[str]]:
    """Rows as sorted text, decimals normalized (so 12.50 and 12.5000 compare equal)."""

    def cell(v: Any) -> str:
        return str(Decimal(v).normalize()) if isinstance(v, Decimal | float) else str(v)

    return sorted([cell(v) for v in row] for row in rows)


def main(argv: list[str]) -> int:
    work, remote = Path(argv[0]), argv[1]

    from dagster import AssetKey, instance_for_test, materialize

    from cdc_assets import emulator
    from cdc_assets.config import parse_config
    from cdc_assets.dagster.dbt_models import model_key
    from cdc_assets.dagster.definitions_builder import build_definitions
    from cdc_assets.dagster.sync.source import load_source
    from cdc_assets.workload import DEMO_TABLES, create_demo_database
    from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness

    db = work / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    workload = create_demo_database(
        conn,
        seed=5,
        rows_per_table=12,
        tables=[t for t in DEMO_TABLES if t.name in TABLES],
        polling_interval=None,
    )  # the workload writes through conn
    emulator.scan(db)
    config = parse_config(
        {
            "sources": [{"name": SOURCE, "connection": {"emulator": {"path": str(db)}}}],
            "storage": {"base_path": str(work / "storage")},
            "spark": {"remote": remote},
            "examples": ["dbt"],
        },
        base_dir=work,
        origin="dbt runner",
    )
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    spark = (defs.resources or {})["pyspark"].spark_session
    models = [model_key(SOURCE, "order_totals"), model_key(SOURCE, "customer_revenue")]
    dbt_assets = defs.resolve_assets_def(models[0])
    with instance_for_test() as instance:
        harness = SyncHarness(db, source, defs, instance, workload, spark)
        harness.sync(limit=3)  # the snapshot
        for _ in range(8):
            workload.step()
        harness.capture()
        harness.sync(limit=3)  # a range: the mirrors built (and registered by name)
        harness.assert_mirrors_equal_source()
        done = materialize([dbt_assets], instance=instance)  # its resources bound by defs
        assert done.success
        lineage = {}
        for key in models:
            event = instance.get_latest_materialization_event(key)
            assert event is not None and event.asset_materialization is not None
            meta = event.asset_materialization.metadata
            column_lineage = meta.get("dagster/column_lineage")
            lineage[key.to_user_string()] = (
                {
                    column: sorted(f"{d.asset_key.to_user_string()}.{d.column_name}" for d in deps)
                    for column, deps in column_lineage.value.deps_by_column.items()
                }
                if column_lineage is not None
                else None
            )
    graph = defs.resolve_asset_graph()
    upstream = {
        key.to_user_string(): sorted(k.to_user_string() for k in _ancestors(graph, key))
        for key in models
    }
    built = {
        "order_totals": _text([list(r) for r in spark.table("cdc_models.order_totals").collect()]),
        "customer_revenue": _text(
            [list(r) for r in spark.table("cdc_models.customer_revenue").collect()]
        ),
    }
    names = sorted(r["viewName"] for r in spark.sql("SHOW VIEWS IN cdc_shop").collect())
    result = {
        "built": built,
        "expected": _source_figures(db),
        "upstream": upstream,
        "column_lineage": lineage,
        "names": names,
        "mirror_key": str(AssetKey(["mirror", SOURCE, "dbo", "orders_mirror"]).to_user_string()),
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def _ancestors(graph: Any, key: Any) -> set[Any]:
    seen: set[Any] = set()
    todo = [key]
    while todo:
        for parent in graph.get(todo.pop()).parent_keys:
            if parent not in seen:
                seen.add(parent)
                todo.append(parent)
    return seen


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
