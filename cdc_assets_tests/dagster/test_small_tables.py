"""Small tables cost what their rows cost: a table of a few rows is snapshotted in the driver
(read through the SQL Server layer, committed by delta-rs), its mirror, with no change to
apply, is its snapshot's rows read and written the same way, and a small range is merged into
a small mirror by delta-rs, so syncing a source of many small tables runs no Spark job for them;
above the size limit Spark merges (and turns deletion vectors on), a small range into such a
mirror again runs no Spark job (its deletion vectors written in the driver), and every mirror
equals its table."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.spark import driver_merges, mirror_store
from cdc_assets.workload import small_tables
from cdc_assets_tests.support.outside_spark import read_with_duckdb
from cdc_assets_tests.support.spark_jobs import newest_job

from .conftest import SyncHarness, make_harness

COLUMNS = ["id", "name", "qty"]


def _engine(harness: SyncHarness, key_path: list[str]) -> str:
    return str(harness.source.store.history(key_path, limit=1)[0].get("engineInfo"))


def test_small_tables_are_snapshotted_and_mirrored_without_a_spark_job(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # t0003 is captured by SQL Server but not by the source: its change moves the max LSN
    harness = make_harness(
        tmp_path, spark, instance, tables=small_tables(4), rows=3, exclude=("dbo.t0003",)
    )
    tables = harness.source.tables
    assert [t.name for t in tables] == ["t0000", "t0001", "t0002"]
    harness.capture()
    before = newest_job(spark)
    assert harness.sync() == 1  # the snapshot run
    assert newest_job(spark) == before, "the snapshot of small tables ran Spark jobs"
    for table in tables:
        assert _engine(harness, list(table.change_log_key.path)).startswith("delta-rs")

    harness.write("UPDATE [dbo].[t0003] SET [qty] = 7 WHERE [id] = 1")
    assert harness.sync() == 1  # the first range: every mirror is built, from its snapshot
    assert newest_job(spark) == before, "mirrors built from small snapshots ran Spark jobs"
    for table in tables:
        assert _engine(harness, list(table.mirror_key.path)).startswith("delta-rs")
        _assert_mirror_equals_its_table(harness, table)

    # a change: merged into the small mirror by delta-rs in the driver, still no Spark job
    changed, other = tables[0], tables[1]
    harness.write(f"DELETE FROM [dbo].[{changed.name}] WHERE [id] = 2")
    harness.write(f"UPDATE [dbo].[{changed.name}] SET [qty] = 9 WHERE [id] = 1")
    assert harness.sync() == 1
    assert newest_job(spark) == before, "a small range into a small mirror ran Spark jobs"
    commit = harness.source.store.history(list(changed.mirror_key.path), limit=1)[0]
    assert commit["operation"] == "MERGE" and commit["engineInfo"].startswith("delta-rs")
    _assert_mirror_equals_its_table(harness, changed)

    # above the size limit Spark merges, and turns deletion vectors on for the mirror
    limit = driver_merges.DRIVER_MERGE_ROWS
    monkeypatch.setattr(mirror_store, "DRIVER_MERGE_ROWS", 0)
    harness.write(f"UPDATE [dbo].[{other.name}] SET [qty] = 5 WHERE [id] = 3")
    assert harness.sync() == 1
    assert newest_job(spark) > before
    assert "Spark" in _engine(harness, list(other.mirror_key.path))
    table = harness.source.store.delta_table(list(other.mirror_key.path))
    assert table.metadata().configuration.get("delta.enableDeletionVectors") == "true"
    _assert_mirror_equals_its_table(harness, other)

    # a small range into a mirror with deletion vectors: they are written in the driver
    monkeypatch.setattr(mirror_store, "DRIVER_MERGE_ROWS", limit)
    harness.write(f"UPDATE [dbo].[{other.name}] SET [qty] = 6 WHERE [id] = 3")
    harness.write(f"DELETE FROM [dbo].[{other.name}] WHERE [id] = 1")
    harness.write(f"INSERT INTO [dbo].[{other.name}] ([id], [name], [qty]) VALUES (40, 'x', 1)")
    before = newest_job(spark)
    assert harness.sync() == 1
    assert newest_job(spark) == before, "a small range into a mirror with deletion vectors"
    # the newest commit but the writer's compaction after it (a file whose rows were all
    # deleted goes: an OPTIMIZE commit, in the driver too)
    commits = harness.source.store.history(list(other.mirror_key.path), limit=3)
    commit = next(c for c in commits if c["operation"] != "OPTIMIZE")
    assert commit["operation"] == "MERGE" and commit["engineInfo"].startswith("cdc_assets")
    _assert_mirror_equals_its_table(harness, other)


def _assert_mirror_equals_its_table(harness: SyncHarness, table: CapturedTable) -> None:
    rows = read_with_duckdb(harness.source.store.location(table.mirror_key.path), COLUMNS)
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        expected = conn.execute(f"SELECT id, name, qty FROM [dbo].[{table.name}]")
        assert Counter(rows) == Counter(tuple(r) for r in expected), table.name
    finally:
        conn.close()


def test_a_small_range_into_the_demo_tables_runs_no_spark_job(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A range of a few changes to the demo's keyed tables (``time`` columns in ``orders``,
    ``[order lines]`` and its ``[line no]``) is read, written and merged in the driver: by
    delta-rs into the small mirrors, and, once Spark's MERGE turned deletion vectors on, with
    the vectors written in the driver, the keyless ``events`` too; no Spark job either time,
    and every mirror equals its table (DuckDB's reading too)."""
    harness = make_harness(tmp_path, spark, instance, rows=12)
    harness.capture()
    before = newest_job(spark)
    assert harness.sync() == 1  # the snapshot run: small tables, read and written in the driver
    assert newest_job(spark) == before, "the snapshot of the demo tables ran Spark jobs"
    harness.write("UPDATE [dbo].[events] SET [severity] = 1")  # the first range builds mirrors
    assert harness.sync() == 1
    tables = {t.name: t for t in harness.source.tables}
    keyed = [t for t in tables.values() if t.instance.key_columns]
    assert sorted(t.name for t in keyed) == ["customers", "order lines", "orders", "products"]

    def small_range(step: int) -> None:
        """One change in each keyed table, a time column and the ``[order lines]`` among them."""
        conn = emulator.connect(str(harness.db), autocommit=True)
        try:
            order = conn.execute("SELECT MIN([order_id]) FROM [dbo].[orders]").fetchone()[0]
            conn.execute(
                "UPDATE [dbo].[orders] SET [pickup_time] = ?, [channel] = ? WHERE [order_id] = ?",
                f"0{step}:1{step}:12.125",
                f"web {step}",
                order,
            )
            conn.execute(
                "INSERT INTO [dbo].[order lines] ([order_id], [line no], [product_id], "
                "[quantity], [unit price]) VALUES (?, ?, 1, ?, 9.5)",
                order,
                100 + step,
                step,
            )
            conn.execute("UPDATE [dbo].[customers] SET [loyalty_tier] = ?", step)
            conn.execute("DELETE FROM [dbo].[products] WHERE [product_id] = ?", step)
            if step >= 2:  # the keyless table too, once Spark's MERGE gave it deletion vectors
                event = conn.execute("SELECT MIN([event_id]) FROM [dbo].[events]").fetchone()[0]
                conn.execute(
                    "UPDATE [dbo].[events] SET [severity] = ?, [duration] = ? WHERE [event_id] = ?",
                    10 + step,
                    f"00:00:0{step}.5",
                    event,
                )
        finally:
            conn.close()
        harness.capture()

    small_range(1)
    before = newest_job(spark)
    assert harness.sync() == 1
    assert newest_job(spark) == before, "a small range into the demo tables ran Spark jobs"
    for table in keyed:
        commit = harness.source.store.history(list(table.mirror_key.path), limit=1)[0]
        assert commit["operation"] == "MERGE", table.name
        assert commit["engineInfo"].startswith("delta-rs"), table.name

    # Spark merges (and turns deletion vectors on) above the limit; then the driver writes them
    with monkeypatch.context() as m:
        m.setattr(mirror_store, "DRIVER_MERGE_ROWS", 0)
        small_range(2)
        assert harness.sync() == 1
    for table in [*keyed, tables["events"]]:
        assert "Spark" in _engine(harness, list(table.mirror_key.path)), table.name
    small_range(3)
    before = newest_job(spark)
    assert harness.sync() == 1
    assert newest_job(spark) == before, "a small range into mirrors with deletion vectors"
    for table in [*keyed, tables["events"]]:
        assert _engine(harness, list(table.mirror_key.path)).startswith("cdc_assets"), table.name
    harness.assert_mirrors_equal_source()
    harness.assert_mirrors_readable_outside_spark()
