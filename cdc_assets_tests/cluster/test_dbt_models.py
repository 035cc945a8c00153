"""The dbt example (``examples: [dbt]``, :mod:`cdc_assets.dagster.dbt_models`) built through
Dagster on a Spark Connect server with a persistent session catalog, as ``make demo`` runs it:
after the demo tables' snapshot and a range, the models (dbt-spark on the same server, reading
the mirrors by name) hold exactly the figures computed from the SQL Server tables, and their
lineage reaches those tables, column by column where dagster-dbt gives it. The client runs in a
subprocess (:mod:`.dbt_runner`): this process holds a classic Spark session already."""

from __future__ import annotations

from pathlib import Path

from cdc_assets_tests.support.spark_connect import connect_server_for

from . import dbt_runner
from .test_spark_connect import run_client

SQLSERVER = ("sqlserver/shop/dbo/orders", "sqlserver/shop/dbo/customers")


def test_dbt_models_build_on_the_mirrors_and_their_lineage_reaches_sql_server(
    tmp_path: Path,
) -> None:
    with connect_server_for(tmp_path, memory="1g", metastore=tmp_path / "metastore") as server:
        result = run_client(server, dbt_runner, str(tmp_path))
    assert result["built"] == result["expected"], "the models hold the source's figures"
    assert result["built"]["customer_revenue"] and result["built"]["order_totals"]
    revenue, totals = "dbt/shop/customer_revenue", "dbt/shop/order_totals"
    lines = next(k for k in result["upstream"][totals] if k.startswith("sqlserver/shop/dbo/order"))
    assert lines.startswith("sqlserver/shop/dbo/order_lines_"), result["upstream"][totals]
    for table in (*SQLSERVER, lines):
        assert table in result["upstream"][revenue], (table, result["upstream"][revenue])
    assert totals in result["upstream"][revenue]
    assert "mirror/shop/dbo/orders_mirror" in result["upstream"][totals]
    # column lineage: dagster-dbt records it for every column of each model, each dependency
    # an upstream asset (which columns it resolves through the views: see the README)
    for model in (totals, revenue):
        lineage = result["column_lineage"][model]
        assert lineage is not None and {"customer_id"} <= set(lineage), (model, lineage)
        for deps in lineage.values():
            assert all(d.rsplit(".", 1)[0] in result["upstream"][model] for d in deps), lineage
    # every mirror and change log by name, in the server's persistent catalog
    assert {"dbo_orders_mirror", "dbo_customers_changes"} <= set(result["names"])
    assert (tmp_path / "metastore" / "metastore_db").is_dir()
