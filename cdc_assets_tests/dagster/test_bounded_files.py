"""Through the real sync runs, every table a range writes (change logs, mirrors, histories, the
source's sync state) stays within a few live files: each writer compacts its own small files
right after its commit, and the data stays right."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets.dagster.sync.sync_state import state_path
from cdc_assets.spark import delta_log, small_files
from cdc_assets.spark.delta_location import local_path
from cdc_assets.workload import table_by_name

from .conftest import make_harness
from .test_history import TABLES, assert_history_equals_change_table, with_history

FANOUT = 3  # small, so that a few ranges compact
RANGES = 14


def _live_files(uri: str) -> int:
    state = delta_log.read(local_path(uri))
    assert state is not None, uri
    return len(state.files)


def _compactions(uri: str) -> int:
    """The writer's compaction commits (OPTIMIZE, every file action ``dataChange=false``)."""
    found = 0
    for path in delta_log.log_folder(local_path(uri)).glob("*.json"):
        text = path.read_text()
        if '"operation":"OPTIMIZE"' in text:
            assert '"dataChange":true' not in text, path
            found += 1
    return found


def test_every_table_stays_within_a_few_files_through_many_ranges(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed and a keyless table with histories, synced range after range (a file added to
    each of their tables per range): each change log, mirror and history, and the sync state,
    holds a few files at the end (the writer's compactions, each changing no data), not one per
    range; mirrors equal the source and histories the versions replayed from the change tables."""
    monkeypatch.setattr(small_files, "FANOUT", FANOUT)
    tables = tuple(table_by_name(TABLES, name) for name in ("dbo.accounts", "dbo.events"))
    harness = make_harness(tmp_path, spark, instance, seed=5, rows=20, tables=tables)
    with_history(harness, include=("*",))
    harness.sync()
    for _ in range(RANGES):
        harness.next_range(3)
    store = harness.source.store
    bound = 3 * (FANOUT - 1) + 2  # a few per level, and the snapshot's apart
    for table in harness.source.tables:
        for key in (table.change_log_key, table.mirror_key, table.history_key):
            uri = store.location(key.path)
            assert _live_files(uri) <= bound, (key.to_user_string(), _live_files(uri))
            assert _compactions(uri), key.to_user_string()
    state = store.location(state_path(harness.source))
    assert _live_files(state) <= bound, _live_files(state)
    harness.assert_mirrors_equal_source()
    for table in harness.source.tables:
        assert_history_equals_change_table(harness, table)
