"""The history asset (SCD type 2): kept in step with the mirror by the real sync runs, equal to
the versions replayed from the source's change table, readable by DuckDB and as of a point in
time by Spark."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, RunRequest
from pyspark.sql import SparkSession

from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.history import history_position
from cdc_assets.dagster.sync.change_log_state import snapshot_info
from cdc_assets.dagster.sync.names import RESNAPSHOT_TAG, SNAPSHOT_PARTITION
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.history_config import HistoryConfig
from cdc_assets.lsn import Lsn
from cdc_assets.spark import history_driver
from cdc_assets.spark.history_store import VALIDITY_COLUMNS, history_as_of
from cdc_assets.sqlserver.lsn_queries import commit_time_at_or_before
from cdc_assets.workload import ColumnDef, TableDef
from cdc_assets_tests.dagster.conftest import SyncHarness, assert_succeeded, make_harness
from cdc_assets_tests.support.history_replay import (
    Version,
    as_of,
    as_of_time,
    cut_at,
    read_change_table,
    replay_versions,
)
from cdc_assets_tests.support.outside_spark import multiset, read_with_duckdb

TABLES = (
    TableDef(
        "dbo",
        "accounts",
        (
            ColumnDef("id", "int", nullable=False),
            ColumnDef("name", "nvarchar(50)", hint="name"),
            ColumnDef("qty", "int", hint="quantity"),
        ),
        primary_key=("id",),
    ),
    TableDef(
        "dbo",
        "order lines",
        (
            ColumnDef("order_id", "bigint", nullable=False),
            ColumnDef("line no", "smallint", nullable=False),
            ColumnDef("quantity", "int", nullable=False, hint="quantity"),
            ColumnDef("unit price", "decimal(12,2)", nullable=False),
        ),
        primary_key=("order_id", "line no"),
        capture_instance_name="dbo_order_lines",
    ),
    TableDef(
        "dbo",
        "events",
        (
            ColumnDef("event_id", "bigint", nullable=False),
            ColumnDef("kind", "varchar(32)", nullable=False, hint="status"),
            ColumnDef("qty", "int", hint="quantity"),
        ),
        keyless_locator=("event_id",),
    ),
)
KINDS = ("key_update", "delete_reinsert", "churn", "mixed", "rollback", "insert", "update")


def with_history(harness: SyncHarness, **settings: Any) -> None:
    """The harness's source with ``history`` settings, its definitions built again."""
    assert harness.config is not None
    config = harness.source.config.model_copy(update={"history": HistoryConfig(**settings)})
    harness.source = replace(harness.source, config=config)
    harness.config = harness.config.model_copy(update={"sources": (config,)})
    harness.defs = build_definitions(harness.config, [harness.source])


def expected_versions(harness: SyncHarness, table: CapturedTable) -> list[Version]:
    """The table's versions replayed from ``cdc.<ci>_CT``, cut at its snapshot LSN."""
    conn = harness.source.connect()
    try:
        changes, times = read_change_table(conn, table.instance.name)
        snapshot = snapshot_info(harness.source, table)
        assert snapshot is not None
        at_time = commit_time_at_or_before(conn, snapshot.snapshot_lsn)
    finally:
        conn.close()
    columns = list(table.instance.column_names)
    versions = replay_versions(changes, times, columns, list(table.instance.key_columns))
    return cut_at(versions, snapshot.snapshot_lsn, at_time)


def _normal(value: Any) -> Any:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def stored_versions(harness: SyncHarness, table: CapturedTable) -> Counter:
    """The history's versions as DuckDB reads them (deletion vectors included)."""
    columns = [*table.instance.column_names, *VALIDITY_COLUMNS]
    uri = harness.source.store.location(table.history_key.path)
    return Counter(tuple(_normal(v) for v in row) for row in read_with_duckdb(uri, columns))


def as_rows(versions: list[Version]) -> Counter:
    return Counter((*v.row, v.start, v.end, v.start_at, v.end_at, v.current) for v in versions)


def assert_history_equals_change_table(harness: SyncHarness, table: CapturedTable) -> list[Version]:
    expected = expected_versions(harness, table)
    found = stored_versions(harness, table)
    want = as_rows(expected)
    assert found == want, (
        f"{table.qualified_name}: only in the history {list((found - want).items())[:3]}; "
        f"only replayed {list((want - found).items())[:3]}"
    )
    return expected


def assert_as_of(
    harness: SyncHarness, spark: SparkSession, table: CapturedTable, versions: list[Version]
) -> None:
    """Spark's reader as of three LSNs and three commit times equals the replayed table then."""
    uri = harness.source.store.location(table.history_key.path)
    columns = [f"`{c}`" for c in table.instance.column_names]
    starts = sorted({v.start for v in versions})
    points = [starts[0], starts[len(starts) // 2], starts[-1]]
    for lsn in points:
        rows = history_as_of(spark, uri, lsn=Lsn.from_bytes(lsn)).select(*columns).collect()
        assert multiset(rows) == multiset(as_of(versions, lsn)), (table.qualified_name, lsn)
    times = sorted({v.start_at for v in versions if v.start_at is not None})
    for at in [times[0], times[len(times) // 2], times[-1]]:
        rows = history_as_of(spark, uri, at=at).select(*columns).collect()
        assert multiset(rows) == multiset(as_of_time(versions, at)), (table.qualified_name, at)


@pytest.mark.parametrize(("seed", "path"), [(3, "driver"), (17, "spark")])
def test_history_equals_versions_replayed_from_the_change_table(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    seed: int,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A random workload (key updates, delete and re-insert in one transaction, several updates
    of one row in one transaction, rollbacks, keyless duplicates) synced in ranges of a few
    transactions: every table's history equals the versions replayed from its change table,
    key by key and interval by interval, read by DuckDB; Spark's reader as of three LSNs and
    three commit times equals the replayed table then. Keyed ranges applied in the driver
    (small ranges, the default) or by Spark's MERGE (``path``: the threshold set to 0)."""
    if path == "spark":
        monkeypatch.setattr(history_driver, "DRIVER_HISTORY_ROWS", 0)
    harness = make_harness(
        tmp_path, spark, instance, seed=seed, rows=25, tables=TABLES, max_transactions=5
    )
    with_history(harness, include=("*",))
    harness.sync()
    # two rounds: every kind of transaction in each, the second closing what the first opened
    for _round in range(2):
        for kind in KINDS:
            harness.workload.run_transaction(kind)
        for _ in range(6):
            harness.workload.step()
        harness.capture()
        harness.sync()
    assert harness.workload.stats.transactions > 0
    for table in harness.source.tables:
        versions = assert_history_equals_change_table(harness, table)
        assert any(not v.current for v in versions), table.qualified_name  # something closed
        assert_as_of(harness, spark, table, versions)
    harness.assert_mirrors_equal_source()


def test_a_range_run_again_changes_no_history(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """A range run executed a second time applies nothing (the history's commit records the
    range it reached); the history still equals the replayed versions."""
    harness = make_harness(tmp_path, spark, instance, rows=10, tables=TABLES[:1])
    with_history(harness, include=("dbo.acc*",))
    harness.sync()
    harness.write(
        "BEGIN TRANSACTION; UPDATE dbo.accounts SET qty = 1 WHERE id = 1; "
        "UPDATE dbo.accounts SET qty = 2 WHERE id = 1; COMMIT"
    )
    data = harness.tick()
    (request,) = data.run_requests
    assert_succeeded(harness.execute(request))
    table = harness.source.tables[0]
    position = history_position(harness.source, table)
    assert position is not None
    versions = harness.source.store.history(table.history_key.path)
    # its snapshot partition and this range show as materialized
    for partition in (SNAPSHOT_PARTITION, request.partition_key):
        assert harness.instance.get_latest_materialization_event(table.history_key) is not None
        found = harness.instance.get_materialized_partitions(table.history_key)
        assert partition in found, (partition, found)
    # the mirrors step ends before the histories step starts (a range's mirrors never wait)
    steps = {s.step_key: s for s in harness.instance.get_run_step_stats(harness.results[-1].run_id)}
    (mirrors,) = [s for k, s in steps.items() if "mirrors" in k]
    (histories,) = [s for k, s in steps.items() if "histories" in k]
    assert mirrors.end_time is not None and histories.start_time is not None
    assert mirrors.end_time <= histories.start_time, (mirrors, histories)
    assert_succeeded(harness.execute(request))  # the same range again
    assert harness.source.store.history(table.history_key.path) == versions
    assert history_position(harness.source, table) == position
    expected = assert_history_equals_change_table(harness, table)
    # two updates of one row in one transaction: one version, with the last state
    ones = sorted((v for v in expected if v.row[0] == 1), key=lambda v: v.start)
    assert len(ones) == 2 and not ones[0].current and ones[1].current, ones
    assert ones[1].row[2] == 2, ones


def test_lineage_shows_change_log_then_history(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """The history asset is in the definitions only for the tables the settings name, beside
    the mirror, and depends on the table's change log."""
    harness = make_harness(tmp_path, spark, instance, rows=3, tables=TABLES)
    with_history(harness, include=("dbo.*",), exclude=("dbo.events",))
    graph = harness.defs.resolve_asset_graph()
    for table in harness.source.tables:
        has = graph.has(table.history_key)
        assert has == (table.name != "events"), table.name
        if has:
            assert table.change_log_key in graph.get(table.history_key).parent_keys
            assert graph.has(table.mirror_key)


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_track_history_columns_updates_the_current_version_in_place(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """With ``track_history_columns: {dbo.accounts: [qty]}``, a change of ``name`` only
    updates the current version; a change of ``qty`` opens a new one; in the driver (a small
    range, the default) or by Spark's MERGE."""
    if path == "spark":
        monkeypatch.setattr(history_driver, "DRIVER_HISTORY_ROWS", 0)
    harness = make_harness(tmp_path, spark, instance, rows=3, tables=TABLES[:1])
    with_history(harness, include=("*",), track_history_columns={"dbo.accounts": ("qty",)})
    harness.sync()
    harness.write("UPDATE dbo.accounts SET name = N'renamed' WHERE id = 1")
    harness.sync()
    harness.write("UPDATE dbo.accounts SET qty = 99 WHERE id = 1")
    harness.write("UPDATE dbo.accounts SET name = N'again' WHERE id = 1")
    harness.sync()
    table = harness.source.tables[0]
    uri = harness.source.store.location(table.history_key.path)
    rows = read_with_duckdb(uri, ["id", "name", "qty", "__is_current", "__end_lsn"])
    ones = sorted((r for r in rows if r[0] == 1), key=lambda r: r[3])
    assert len(ones) == 2, ones  # the snapshot's version and the one qty = 99 opened
    closed, current = ones
    assert closed[1] == "renamed" and closed[4] is not None
    assert current[1:4] == ("again", 99, True)


def test_resnapshot_keeps_the_history_before_it(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """A re-snapshot closes, at its LSN, the versions of rows that changed or vanished and
    opens the rows that differ; the versions before it stay."""
    harness = make_harness(tmp_path, spark, instance, rows=5, tables=TABLES[:1])
    with_history(harness, include=("*",))
    harness.sync()
    harness.write("UPDATE dbo.accounts SET qty = 7 WHERE id = 1")
    harness.sync()
    table = harness.source.tables[0]
    before = stored_versions(harness, table)
    harness.write("UPDATE dbo.accounts SET qty = 8 WHERE id = 2")
    harness.write("DELETE FROM dbo.accounts WHERE id = 3")
    # a person's re-snapshot (the change log's snapshot partition again), then the next range
    request = RunRequest(
        partition_key=SNAPSHOT_PARTITION,
        asset_selection=[table.change_log_key],
        tags={RESNAPSHOT_TAG: "test"},
    )
    assert_succeeded(harness.execute(request))
    harness.write("UPDATE dbo.accounts SET qty = 9 WHERE id = 4")
    harness.sync()
    after = stored_versions(harness, table)
    snapshot = snapshot_info(harness.source, table)
    assert snapshot is not None
    at = snapshot.snapshot_lsn.raw
    kept = {r for r in before if r[-1] is False}  # closed before the re-snapshot: unchanged
    assert kept <= set(after)
    by_id: dict[int, list[tuple]] = {}
    for row in after:
        by_id.setdefault(row[0], []).append(row)
    # (columns: id, name, qty, __start_lsn, __end_lsn, __start_at, __end_at, __is_current)
    # id 2 changed while the history did not follow: closed and opened at the snapshot LSN
    assert any(r[3] == at and r[2] == 8 and r[-1] for r in by_id[2]), by_id[2]
    assert any(r[4] == at for r in by_id[2]), by_id[2]
    # id 3 vanished: its version closed at the snapshot LSN, none current
    assert not any(r[-1] for r in by_id[3]) and any(r[4] == at for r in by_id[3])
    # id 4 changed after the snapshot: a version of its own from that range on
    assert sum(r[-1] for r in by_id[4]) == 1
    # id 5 did not change: its one version from the first snapshot stays
    assert len(by_id[5]) == 1 and by_id[5][0][-1]
