"""A range run works only on the tables that changed in it: one statement tells which capture
instances have change rows, and the run records the range for the quiet tables in the source's
sync state (0 rows, coverage proven) without reading, writing or materializing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.health_checks import CAPTURE_HEALTH
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import change_log_outputs
from cdc_assets.dagster.sync.chain_end_check import AT_CHAIN_END
from cdc_assets.dagster.sync.names import CHAIN, COVERAGE
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.workload import DEMO_TABLES

from .conftest import SyncHarness, failure_text, make_harness

TABLES = DEMO_TABLES[:3]  # customers, products, orders


def _update_customer(harness: SyncHarness, name: str) -> None:
    harness.write(f"UPDATE [dbo].[customers] SET [name] = N'{name}' WHERE [customer_id] = 1")


def test_a_range_runs_only_the_tables_that_changed(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness: SyncHarness = make_harness(tmp_path, spark, instance, tables=TABLES)
    harness.capture()
    harness.sync()
    _update_customer(harness, "first")  # this range builds every mirror from its snapshot
    harness.sync()
    state = SourceSync.load(harness.source, fill=False)
    assert not state.missing and all(state[t].mirror_built for t in harness.source.tables)
    before = {t: state[t] for t in harness.source.tables}
    _update_customer(harness, "renamed")

    read: list[str] = []
    reads = change_log_outputs.sqlserver_source
    in_spark, in_driver = reads.read_change_range, reads.read_changes_in_driver

    def recorded(spark: Any, settings: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(instance.name)
        return in_spark(spark, settings, instance, *args, **kwargs)

    def recorded_here(settings: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(instance.name)  # a range of a few changes is read in the driver
        return in_driver(settings, instance, *args, **kwargs)

    monkeypatch.setattr(reads, "read_change_range", recorded)
    monkeypatch.setattr(reads, "read_changes_in_driver", recorded_here)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    request = data.run_requests[0]
    customers = next(t for t in harness.source.tables if t.name == "customers")
    quiet = [t for t in harness.source.tables if t is not customers]
    # the run works on the table that changed: its change log and mirror, nothing else
    assert set(request.asset_selection or []) == {customers.change_log_key, customers.mirror_key}
    result = harness.execute(request)
    assert result.success, failure_text(result)
    assert read == ["dbo_customers"], read

    key = request.partition_key
    assert key is not None
    hi = LsnRange.parse_key(key).hi
    store = harness.source.store
    properties = store.properties(customers.change_log_key.path, key) or {}
    assert properties["rows"] == 2 and properties["coverage"]["ok"]  # before and after image
    state = SourceSync.load(harness.source, fill=False)
    for table in quiet:
        # nothing written for the quiet tables: no change-log partition, no mirror commit ...
        assert store.properties(table.change_log_key.path, key) is None, table.name
        committed = store.commit_properties(table.mirror_key.path)
        assert committed is not None and committed[1]["lsn"] == before[table].mirror_commit.hex
        # ... their mirrors are at the range's end through the sync state
        assert (
            state[table].mirror_at == hi
            and state[table].mirror_commit == before[table].mirror_commit
        )
        assert mirror_lsn(harness.source, table) == hi
    assert state[customers].mirror_commit == hi and mirror_lsn(harness.source, customers) == hi
    checks = [e.passed for e in result.get_asset_check_evaluations()]
    assert checks and all(checks)
    # the run tells that the SQL Server table changed (its external asset), of that table only
    changed = {
        m.asset_key: m.metadata["change_rows"].value
        for m in result.asset_materializations_for_node(f"{harness.source.name}_change_logs")
        if m.asset_key in {t.source_key for t in harness.source.tables}
    }
    assert changed == {customers.source_key: 2}, changed
    # Dagster hears of the quiet tables' range (a small source: every range), 0 rows, quiet
    reported = {
        m.asset_key: m
        for m in result.asset_materializations_for_node(f"{harness.source.name}_change_logs")
        if m.metadata.get("quiet")
    }
    assert set(reported) == {k for t in quiet for k in (t.change_log_key, t.mirror_key)}
    assert all(m.partition == key for m in reported.values())
    assert all(reported[t.change_log_key].metadata["dagster/row_count"].value == 0 for t in quiet)
    # the range reads as a written one does: found by commit time in any table's partitions
    shown = reported[quiet[0].change_log_key].metadata
    assert shown["transactions"].value == 1 and shown["rows_update_after"].value == 0, shown
    assert (
        ".." in shown["commit_time_range"].value and "None" not in shown["commit_time_range"].value
    )
    # ... with their checks' results in the same run: the UI shows a check passed only when its
    # latest result is for the asset's latest materialization
    quiet_checks = {
        AssetCheckKey(key, name)
        for t in quiet
        for key, name in [
            (t.change_log_key, COVERAGE),
            (t.change_log_key, CHAIN),
            (t.change_log_key, CAPTURE_HEALTH),  # a source-wide check, in every range run
            (t.mirror_key, AT_CHAIN_END),
        ]
    }
    evaluated = {e.asset_check_key: e for e in result.get_asset_check_evaluations()}
    assert quiet_checks <= set(evaluated), set(evaluated)
    assert all(evaluated[k].passed for k in quiet_checks), [evaluated[k] for k in quiet_checks]
    for check_key in quiet_checks:
        (latest,) = instance.event_log_storage.get_asset_check_execution_history(check_key, 1)
        shown = instance.get_latest_materialization_event(check_key.asset_key)
        assert shown is not None and latest.run_id == shown.run_id == result.run_id, check_key
    harness.assert_mirrors_equal_source()
    # the sensor sees every table at the chain's end: nothing to catch up, nothing to run
    assert not harness.tick().run_requests


def test_a_range_where_no_selected_table_changed_moves_the_chain_on(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """Transactions that only touch tables the source does not select move the max LSN: the
    range is added (the chain must move on), one table runs it and records it for all."""
    harness: SyncHarness = make_harness(tmp_path, spark, instance, tables=TABLES)
    harness.capture()
    harness.sync()
    _update_customer(harness, "first")
    harness.sync()
    # a table of the database this source does not select
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        conn.execute("CREATE TABLE [dbo].[elsewhere] ([id] INT PRIMARY KEY, [v] INT)")
        cdc_admin.enable_table(conn, "dbo", "elsewhere")
        harness.capture()
        conn.execute("INSERT INTO [dbo].[elsewhere] VALUES (1, 1)")
    finally:
        conn.close()
    harness.capture()
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    request = data.run_requests[0]
    first = harness.source.tables[0]
    assert set(request.asset_selection or []) == {first.change_log_key, first.mirror_key}
    result = harness.execute(request)
    assert result.success, failure_text(result)
    hi = LsnRange.parse_key(request.partition_key or "").hi
    assert all(mirror_lsn(harness.source, t) == hi for t in harness.source.tables)
    harness.assert_mirrors_equal_source()
