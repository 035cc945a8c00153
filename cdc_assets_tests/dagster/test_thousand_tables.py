"""A source with many captured tables and few changes (correctness, not speed): the snapshot and
the first range bring every mirror up; then each range runs only the tables that changed in it,
records the others quiet, and every mirror equals its table at the same LSN — read outside Spark
(DuckDB), as a data platform would.

``make test`` runs it at 120 tables (2 steps: 100 and 20; about a minute on 2 cores, beside the
other files); ``make test-large`` at a thousand (``CDC_TEST_MANY_TABLES``), ~12 min alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.lsn import LsnRange
from cdc_assets.workload import small_tables

from .conftest import assert_small_mirrors_equal, failure_text, make_harness

TABLES = int(os.environ.get("CDC_TEST_MANY_TABLES", "120"))

pytestmark = pytest.mark.large


def test_a_thousand_tables_sync_ranges_that_touch_few_of_them(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(tmp_path, spark, instance, tables=small_tables(TABLES), rows=2)
    assert len(harness.source.tables) == TABLES
    harness.capture()
    harness.sync()  # the snapshot of every table
    harness.write(f"UPDATE [dbo].[{harness.source.tables[0].name}] SET [qty] = 7 WHERE [id] = 1")
    harness.sync()  # the range that builds every mirror from its snapshot
    state = SourceSync.load(harness.source, fill=False)
    assert not state.missing and all(state[t].mirror_built for t in harness.source.tables)

    tables = harness.source.tables
    for round_, touched in enumerate(([3, TABLES // 2, TABLES - 1], [3, 77], [0])):
        conn = emulator.connect(str(harness.db), autocommit=False)
        try:  # one transaction across the touched tables
            for i in touched:
                name = tables[i].name
                conn.execute(f"UPDATE [dbo].[{name}] SET [qty] = [qty] + 1 WHERE [id] = 1")
                conn.execute(f"INSERT INTO [dbo].[{name}] VALUES ({10 + round_}, N'new', 0)")
                if round_ == 0:
                    conn.execute(f"DELETE FROM [dbo].[{name}] WHERE [id] = 2")
            conn.commit()
        finally:
            conn.close()
        harness.capture()
        data = harness.tick()
        assert len(data.run_requests) == 1, data.skip_message
        request = data.run_requests[0]
        selected = set(request.asset_selection or [])
        assert selected == {
            k for i in touched for k in (tables[i].change_log_key, tables[i].mirror_key)
        }
        result = harness.execute(request)
        assert result.success, failure_text(result)
        hi = LsnRange.parse_key(request.partition_key or "").hi
        state = SourceSync.load(harness.source, fill=False)
        at = {state[t].mirror_at for t in tables}
        assert at == {hi}, f"mirrors at {len(at)} different LSNs"
        assert not harness.tick().run_requests  # nothing behind, nothing new
    assert_small_mirrors_equal(harness)
