"""The first sync of a real database (issue 38): one table that cannot be snapshotted holds back
no other table, is retried on its own growing schedule and catches up once it can; a table
captured later snapshots beside the ranges of the others, which keep flowing while its
snapshot is under way."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, RunRequest
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster import change_log
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.names import RANGE_LANE_TAG, SNAPSHOT_PARTITION
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.dagster.sync.table_failures import FAILED_TABLES_TAG, pause_after
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.workload import TableDef, small_tables
from cdc_assets_tests.support.outside_spark import multiset, read_with_duckdb

from .conftest import SyncHarness, assert_succeeded, failure_text, hold, make_harness

KEYED = small_tables(2)
KEYLESS = TableDef("dbo", "audit_log", KEYED[0].columns)  # no key, duplicates allowed
COLUMNS = ["id", "name", "qty"]


def _source_rows(harness: SyncHarness, table: CapturedTable) -> Any:
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        return multiset(conn.execute(f"SELECT id, name, qty FROM [dbo].[{table.name}]"))
    finally:
        conn.close()


def _assert_equal_by_duckdb(harness: SyncHarness, tables: Sequence[CapturedTable]) -> Lsn:
    """Each mirror of ``tables``, read by DuckDB, holds its table's rows; all at one LSN."""
    at = set()
    for table in tables:
        location = harness.source.store.location(table.mirror_key.path)
        mirrored = multiset(read_with_duckdb(location, COLUMNS))
        assert mirrored == _source_rows(harness, table), table.qualified_name
        at.add(mirror_lsn(harness.source, table))
    assert len(at) == 1, at
    return at.pop()


def _change(harness: SyncHarness, tables: Sequence[CapturedTable], round_: int) -> None:
    """One transaction per table of ``tables`` (an update of every row), captured."""
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        for table in tables:
            conn.execute(f"UPDATE [dbo].[{table.name}] SET qty = qty + {round_}")
    finally:
        conn.close()
    harness.capture()


def _selected(harness: SyncHarness, request: RunRequest) -> set[CapturedTable]:
    keys = set(request.asset_selection or [])
    return {t for t in harness.source.tables if t.change_log_key in keys}


def _snapshot_isolation(harness: SyncHarness, on: bool) -> None:
    conn = harness.source.connect()
    try:
        state = "ON" if on else "OFF"
        conn.cursor().execute(f"ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION {state}")
    finally:
        conn.close()


def test_a_table_that_cannot_be_snapshotted_holds_back_no_other(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's case: two keyed tables and a keyless one in a database without snapshot
    isolation. The keyless table's snapshot fails alone; the keyed tables get their snapshots,
    mirrors and every following range; the keyless one is retried after a pause that grows
    with each failure, and catches up once snapshot isolation is on."""
    harness = make_harness(tmp_path, spark, instance, tables=(*KEYED, KEYLESS), rows=6)
    _snapshot_isolation(harness, on=False)
    keyless = next(t for t in harness.source.tables if t.name == KEYLESS.name)
    keyed = [t for t in harness.source.tables if t != keyless]

    (first,) = harness.tick().run_requests
    assert first.partition_key == SNAPSHOT_PARTITION
    assert _selected(harness, first) == set(harness.source.tables)
    assert RANGE_LANE_TAG not in first.tags  # the run queue lets it go beside range runs
    result = harness.execute(first)
    assert not result.success
    text = failure_text(result)
    assert "1 of 3 tables not snapshotted" in text and keyless.qualified_name in text, text
    assert "ALLOW_SNAPSHOT_ISOLATION ON" in text
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and keyless.qualified_name in run.tags[FAILED_TABLES_TAG]
    row = SourceSync.load(harness.source)[keyless]
    assert row.failures == 1 and "no primary key or unique index" in (row.failure or "")

    # three rounds of changes: every tick runs the range for the keyed tables only; the keyless
    # table waits for its own retry, and the tick says so (a pause longer than the rounds take
    # on a loaded machine: 30 s were over before the third round there)
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 3600.0)
    for round_ in range(1, 4):
        _change(harness, harness.source.tables, round_)
        data = harness.tick()
        (request,) = data.run_requests
        assert request.partition_key != SNAPSHOT_PARTITION, request
        assert request.tags[RANGE_LANE_TAG] == harness.source.name  # one at a time per source
        assert keyless not in _selected(harness, request)
        assert_succeeded(harness.execute(request))
    assert not harness.source.store.is_published(keyless.mirror_key.path, None)
    _change(harness, keyed, 9)
    harness.sync()
    at = _assert_equal_by_duckdb(harness, keyed)
    assert at == LsnRange.parse_key(harness.results[-1].dagster_run.tags["dagster/partition"]).hi
    waiting = harness.tick().skip_message or ""
    assert f"{keyless.qualified_name} (failed 1x, next try in" in waiting, waiting

    # its pause over, it is tried alone, fails again, and waits longer: the pause doubles
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    (retry,) = harness.tick().run_requests
    assert retry.partition_key == SNAPSHOT_PARTITION and _selected(harness, retry) == {keyless}
    alone = harness.execute(retry)
    assert not alone.success
    text = failure_text(alone)  # the table alone in its run: no "others" to speak of
    assert f"not snapshotted: {keyless.qualified_name}: " in text, text
    assert "others" not in text and "1 of 1" not in text, text
    assert SourceSync.load(harness.source)[keyless].failures == 2
    assert pause_after(2, 30.0, 1800.0) == 60.0 and pause_after(9, 30.0, 1800.0) == 1800.0
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 30.0)
    waiting = harness.tick().skip_message or ""
    assert "(failed 2x, next try in" in waiting, waiting
    seconds = float(waiting.split("next try in ")[1].split(" s")[0])
    assert 30 < seconds <= 60, waiting

    # snapshot isolation on: its next attempt succeeds and it joins the chain
    _snapshot_isolation(harness, on=True)
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    harness.sync()
    _change(harness, harness.source.tables, 20)
    harness.sync()
    _assert_equal_by_duckdb(harness, harness.source.tables)
    assert SourceSync.load(harness.source)[keyless].failures == 0


def test_a_new_table_snapshots_beside_the_ranges_of_the_others(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A table captured while the source syncs appears after the code location reloads and
    is snapshotted by a run of its own; while that run is under way, ranges keep flowing for
    the other tables; then it joins them."""
    harness = make_harness(tmp_path, spark, instance, tables=KEYED, rows=5)
    harness.sync()
    _change(harness, harness.source.tables, 1)
    harness.sync()
    old = list(harness.source.tables)
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        conn.execute(
            "CREATE TABLE [dbo].[late] (id int NOT NULL PRIMARY KEY, name nvarchar(50), qty int)"
        )
        for i in range(1, 8):
            conn.execute(f"INSERT INTO [dbo].[late] VALUES ({i}, N'late {i}', {i * 10})")
        cdc_admin.enable_table(conn, "dbo", "late")
    finally:
        conn.close()
    harness.capture()
    harness.reload()
    late = next(t for t in harness.source.tables if t.name == "late")

    # the new table's snapshot is held under way in a run of its own
    held = hold(monkeypatch, change_log, "snapshot_output", "the snapshot")
    data = harness.tick()
    snapshot = next(r for r in data.run_requests if r.partition_key == SNAPSHOT_PARTITION)
    assert _selected(harness, snapshot) == {late}
    outcome: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: outcome.update(result=harness.execute(snapshot)))
    runner.start()
    try:
        assert held.reached.wait(300), "the snapshot run did not start"
        for request in data.run_requests:
            if request is not snapshot:
                assert_succeeded(harness.execute(request))
        # ranges flow for the others while the snapshot is under way: never for the new table,
        # never a second snapshot run of it
        for round_ in range(2, 4):
            _change(harness, old, round_)
            tick = harness.tick()
            assert len(tick.run_requests) == 1, tick.skip_message
            (request,) = tick.run_requests
            assert request.partition_key != SNAPSHOT_PARTITION
            assert _selected(harness, request) <= set(old)
            assert_succeeded(harness.execute(request))
            hi = LsnRange.parse_key(request.partition_key or "").hi
            assert _assert_equal_by_duckdb(harness, old) == hi
        assert runner.is_alive()
    finally:
        held.release.set()
        runner.join(600)
    assert_succeeded(outcome["result"])
    harness.sync()
    _change(harness, harness.source.tables, 7)
    harness.sync()
    _assert_equal_by_duckdb(harness, harness.source.tables)
