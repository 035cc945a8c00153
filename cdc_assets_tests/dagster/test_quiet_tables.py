"""A range reads only the tables that changed in it: one statement tells which capture instances
have change rows, and the quiet tables record the range (0 rows, coverage proven) without a read
of the source and without a Spark job counting their rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster import change_log_outputs
from cdc_assets.emulator.workload import DEMO_TABLES

from .conftest import SyncHarness, failure_text, make_harness

TABLES = DEMO_TABLES[:3]  # customers, products, orders


def test_a_range_reads_only_the_tables_that_changed(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness: SyncHarness = make_harness(tmp_path, spark, instance, tables=TABLES)
    harness.capture()
    harness.sync()
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        conn.execute("UPDATE [dbo].[customers] SET [name] = N'renamed' WHERE [customer_id] = 1")
    finally:
        conn.close()
    harness.capture()

    read: list[str] = []
    real_read = change_log_outputs.sqlserver_source.read_change_range

    def recorded(spark: Any, settings: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(instance.name)
        return real_read(spark, settings, instance, *args, **kwargs)

    monkeypatch.setattr(change_log_outputs.sqlserver_source, "read_change_range", recorded)
    # the mirrors of the quiet tables read no change rows: their LSN moves on in metadata only
    mirrors_read: list[str] = []
    store_type = type(harness.source.store)
    real_partitions = store_type.read_partitions

    def partitions_recorded(store: Any, spark: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        mirrors_read.append(path[-1])
        return real_partitions(store, spark, path, *args, **kwargs)

    monkeypatch.setattr(store_type, "read_partitions", partitions_recorded)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    result = harness.execute(data.run_requests[0])
    assert result.success, failure_text(result)

    assert read == ["dbo_customers"], read
    assert set(mirrors_read) == {"customers_changes"}, mirrors_read
    key = data.run_requests[0].partition_key
    for table in harness.source.tables:
        properties = harness.source.store.properties(table.change_log_key.path, key) or {}
        assert properties.get("coverage", {}).get("ok"), (table.name, properties)
        expected = 2 if table.name == "customers" else 0  # update: before and after image
        assert properties["rows"] == expected, (table.name, properties["rows"])
    checks = [e.passed for e in result.get_asset_check_evaluations()]
    assert checks and all(checks)
    # the run tells that the SQL Server table changed (its external asset), of that table only
    changed = {
        m.asset_key: m.metadata["change_rows"].value
        for m in result.asset_materializations_for_node(f"{harness.source.name}_change_logs")
        if m.asset_key in {t.source_key for t in harness.source.tables}
    }
    customers = next(t for t in harness.source.tables if t.name == "customers")
    assert changed == {customers.source_key: 2}, changed
    harness.assert_mirrors_equal_source()
