"""Range partitions are retired after ``sync.retain_ranges`` once every mirror applied them, and
the sensor's tick reads the chain's end from the newest keys only, whatever their number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, RunRequest
from pyspark.sql import SparkSession

from cdc_assets.dagster.sync.chain import range_partitions, retired_through
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, partitions_name
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.workload import DEMO_TABLES

from .conftest import SOURCE, SyncHarness, failure_text, make_harness

MANY = 100_000
TABLES = DEMO_TABLES[:2]  # what is tested is the chain, not the tables


def _keys(harness: SyncHarness) -> list[str]:
    return list(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))


def test_ranges_past_a_count_are_retired_and_the_chain_continues(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """retain_ranges: 1 keeps the newest range: each new range retires the ones before the newest.
    Their change-log partitions stay; the oldest kept range passes its chain check again."""
    harness = make_harness(tmp_path, spark, instance, tables=TABLES, retain_ranges=1)
    harness.sync()  # the snapshot (and a first range when capture passed it)
    chain = range_partitions(_keys(harness))
    while len(chain) < 3:
        chain.append(harness.next_range())
    kept = range_partitions(_keys(harness))
    assert kept == chain[-2:], "the newest range and the one the new range was planned from"
    assert SNAPSHOT_PARTITION in _keys(harness)
    assert retired_through(instance, partitions_name(SOURCE)) == chain[-2].lo
    for table in harness.source.tables:  # the rows stay in the change log
        for retired in chain[:-2]:
            assert harness.source.store.is_published(table.change_log_key.path, retired.key)
    harness.assert_mirrors_equal_source()

    # the oldest kept range has no predecessor among the keys: its chain check accepts the
    # retired end, so a rerun of it (a backfill, a retry) passes
    rerun = harness.execute(RunRequest(partition_key=kept[0].key))
    checks = {
        (e.asset_key.path[0], e.check_name): e.passed for e in rerun.get_asset_check_evaluations()
    }
    assert checks and all(checks.values()), checks
    harness.assert_mirrors_equal_source()


def test_a_tick_reads_the_chain_end_without_listing_100k_keys(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100k range keys exist (an old chain below the snapshot); the tick finds the end from the
    newest page of keys, never lists them all, and the range it adds syncs the mirrors. Nothing
    was committed a day ago, so retain_ranges: 1d retires none of them."""
    harness = make_harness(tmp_path, spark, instance, tables=TABLES, retain_ranges="1d")
    name = partitions_name(SOURCE)
    old = [LsnRange(Lsn.from_parts(0, i + 1, 0), Lsn.from_parts(0, i + 2, 0)) for i in range(MANY)]
    for start in range(0, MANY, 10_000):
        instance.add_dynamic_partitions(name, [r.key for r in old[start : start + 10_000]])
    assert harness.sync() >= 1

    read: list[int] = []
    paginated = instance.get_paginated_dynamic_partitions

    def counted(*args: Any, **kwargs: Any) -> Any:
        page = paginated(*args, **kwargs)
        read.append(len(page.results))
        return page

    listing = instance.get_dynamic_partitions

    def listing_all(partitions_def_name: str) -> Any:
        if partitions_def_name == name:  # the range keys; the sensor lock's queue is tiny
            raise AssertionError("the tick listed every partition key")
        return listing(partitions_def_name)

    for _ in range(4):
        harness.workload.step()
    harness.capture()
    with monkeypatch.context() as patch:
        patch.setattr(instance, "get_paginated_dynamic_partitions", counted)
        patch.setattr(instance, "get_dynamic_partitions", listing_all)
        data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    assert sum(read) <= 3 * 64, read
    new = LsnRange.parse_key(data.run_requests[0].partition_key)
    assert new.lo == max(r.hi for r in range_partitions(_keys(harness)) if r != new)
    result = harness.execute(data.run_requests[0])
    assert result.success, failure_text(result)
    harness.assert_mirrors_equal_source()
    assert len(_keys(harness)) == MANY + 3  # the old chain, snapshot, two ranges
    assert retired_through(instance, name) is None
