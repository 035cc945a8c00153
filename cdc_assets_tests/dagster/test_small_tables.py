"""Small tables cost what their rows cost: a table of a few rows is snapshotted in the driver
(read through the SQL Server layer, committed by delta-rs) and its mirror, with no change to
apply, is its snapshot's rows read and written the same way, so the first sync of a source of
many small tables runs no Spark job for them; a table whose first range has changes is merged
by Spark as before, and every mirror equals its table."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.emulator.workload import small_tables
from cdc_assets_tests.support.outside_spark import read_with_duckdb

from .conftest import SyncHarness, make_harness

COLUMNS = ["id", "name", "qty"]


def _newest_job(spark: SparkSession) -> int:
    """The id of the newest Spark job of this driver (-1 before any)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])


def _engine(harness: SyncHarness, key_path: list[str]) -> str:
    return str(harness.source.store.history(key_path, limit=1)[0].get("engineInfo"))


def test_small_tables_are_snapshotted_and_mirrored_without_a_spark_job(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    # t0003 is captured by SQL Server but not by the source: its change moves the max LSN
    harness = make_harness(
        tmp_path, spark, instance, tables=small_tables(4), rows=3, exclude=("dbo.t0003",)
    )
    tables = harness.source.tables
    assert [t.name for t in tables] == ["t0000", "t0001", "t0002"]
    harness.capture()
    before = _newest_job(spark)
    assert harness.sync() == 1  # the snapshot run
    assert _newest_job(spark) == before, "the snapshot of small tables ran Spark jobs"
    for table in tables:
        assert _engine(harness, list(table.change_log_key.path)).startswith("delta-rs")

    harness.write("UPDATE [dbo].[t0003] SET [qty] = 7 WHERE [id] = 1")
    assert harness.sync() == 1  # the first range: every mirror is built, from its snapshot
    assert _newest_job(spark) == before, "mirrors built from small snapshots ran Spark jobs"
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        for table in tables:
            assert _engine(harness, list(table.mirror_key.path)).startswith("delta-rs")
            rows = read_with_duckdb(harness.source.store.location(table.mirror_key.path), COLUMNS)
            expected = conn.execute(f"SELECT id, name, qty FROM [dbo].[{table.name}]")
            assert Counter(rows) == Counter(tuple(r) for r in expected), table.name
    finally:
        conn.close()

    # a change: merged into its mirror by Spark, which gets deletion vectors for it
    changed = tables[0]
    harness.write(f"DELETE FROM [dbo].[{changed.name}] WHERE [id] = 2")
    assert harness.sync() == 1
    assert _newest_job(spark) > before
    assert "Spark" in _engine(harness, list(changed.mirror_key.path))
    rows = read_with_duckdb(harness.source.store.location(changed.mirror_key.path), COLUMNS)
    assert sorted(r[0] for r in rows) == [1, 3]
