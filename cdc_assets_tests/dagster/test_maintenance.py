"""The maintenance job keeps storage and run history bounded and leaves what the UI shows."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from dagster import AssetRecordsFilter, DagsterInstance, RunRequest, RunsFilter
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from pyspark.sql import SparkSession

from cdc_assets.config import MaintenancePolicy, parse_config
from cdc_assets.dagster import maintenance
from cdc_assets.dagster.demo.in_process import execute_request
from cdc_assets.dagster.sync.chain import range_partitions, retired_through
from cdc_assets.dagster.sync.names import (
    SNAPSHOT_PARTITION,
    maintenance_job_name,
    partitions_name,
    sync_job_name,
)
from cdc_assets.spark import mirror_store
from cdc_assets.spark.delta_location import local_path
from cdc_assets.spark.mirror_versions import lsn_versions, read_mirror_as_of
from cdc_assets.workload import DEMO_TABLES

from .conftest import SOURCE, SyncHarness, failure_text, make_harness

TABLES = DEMO_TABLES[:2]


def _maintain(harness: SyncHarness) -> None:
    job = harness.defs.resolve_job_def(maintenance_job_name(SOURCE))
    result = execute_request(job, harness.instance, RunRequest())
    assert result.success, failure_text(result)


def _data_files(directory: Path) -> set[str]:
    return {
        str(p.relative_to(directory))
        for p in directory.rglob("*.parquet")
        if "_delta_log" not in p.parts
    }


def test_maintenance_vacuums_drops_retired_changes_and_deletes_their_runs(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        tables=TABLES[:1],
        retain_ranges=1,
        maintenance=MaintenancePolicy.model_construct(
            cron="0 * * * *", keep_history="0s", drop_retired_changes=True, keep_runs="0s"
        ),
    )
    harness.sync()
    chain = [harness.next_range(6) for _ in range(4)]
    store = harness.source.store
    through = retired_through(instance, partitions_name(SOURCE))
    retired = [r for r in chain if through is not None and r.hi <= through]
    kept = range_partitions(instance.get_dynamic_partitions(partitions_name(SOURCE)))
    assert retired and kept, (chain, kept)
    table = harness.source.tables[0]
    mirror_dir = local_path(store.location(table.mirror_key.path))
    log_dir = local_path(store.location(table.change_log_key.path))
    mirror_before, log_before = _data_files(mirror_dir), _data_files(log_dir)
    first_lsn = lsn_versions(spark, str(mirror_dir))[0][0]
    runs_before = {
        r.tags.get("dagster/partition"): r.run_id
        for r in instance.get_runs(RunsFilter(job_name=sync_job_name(SOURCE)))
    }

    _maintain(harness)

    for t in harness.source.tables:  # retired ranges' rows are gone, the rest stays
        keys = store.partition_keys(t.change_log_key.path)
        assert SNAPSHOT_PARTITION in keys
        assert not {r.key for r in retired} & set(keys), keys
        assert {r.key for r in kept} <= set(keys), keys
    # files of earlier versions are deleted: only what the current version reads is left
    mirror_after, log_after = _data_files(mirror_dir), _data_files(log_dir)
    assert mirror_before - mirror_after and log_after < log_before
    current = {Path(f).name for f in spark.read.format("delta").load(str(mirror_dir)).inputFiles()}
    assert {Path(f).name for f in mirror_after if "_change_data" not in f} == current
    harness.assert_mirrors_equal_source()
    try:  # time travel stops at the kept history
        read_mirror_as_of(spark, str(mirror_dir), first_lsn).count()
        reached_old_version = True
    except Exception:
        reached_old_version = False
    assert not reached_old_version

    # runs of retired ranges are deleted; the snapshot's and the kept ranges' are not, and every
    # asset still shows its snapshot partition and the kept ranges as materialized
    # (the mirrors' snapshot partition is logged by the first range run after the snapshot)
    runs_after = {r.run_id for r in instance.get_runs(RunsFilter(job_name=sync_job_name(SOURCE)))}
    shown_snapshot = {
        record.run_id
        for t in harness.source.tables
        for record in instance.fetch_materializations(
            AssetRecordsFilter(asset_key=t.mirror_key, asset_partitions=[SNAPSHOT_PARTITION]), 1
        ).records
    }
    deleted = [r for r in retired if runs_before[r.key] not in shown_snapshot]
    assert deleted
    events = instance.event_log_storage
    for r in deleted:
        assert runs_before[r.key] not in runs_after, r.key
        if isinstance(events, SqliteEventLogStorage):  # its event file goes with it
            assert not Path(events.path_for_shard(runs_before[r.key])).exists()
    assert shown_snapshot <= runs_after
    for key in [SNAPSHOT_PARTITION, *(r.key for r in kept)]:
        assert runs_before[key] in runs_after, key
    for t in harness.source.tables:
        for asset in (t.change_log_key, t.mirror_key):
            shown = instance.get_materialized_partitions(asset)
            assert SNAPSHOT_PARTITION in shown, asset
            assert {r.key for r in kept} <= shown, asset

    # the sync goes on: a new range applies; after maintenance dropped the rows before it, the
    # oldest kept range reruns (its chain check passes)
    harness.next_range(6)
    harness.assert_mirrors_equal_source()
    _maintain(harness)
    oldest = range_partitions(instance.get_dynamic_partitions(partitions_name(SOURCE)))[0]
    rerun = harness.execute(RunRequest(partition_key=oldest.key))
    assert rerun.success, failure_text(rerun)


def test_default_maintenance_keeps_history_and_every_change(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without drop_retired_changes and with 7 days of history, maintenance deletes nothing a
    reader may still use: every retired range's rows and every mirror version stay. It
    compacts nothing either (each writer compacts its own files): its one commit is the history
    setting, which changes no row, no LSN, and no later range."""
    # Spark's MERGEs, which add files (a small mirror's delta-rs MERGE rewrites its one file)
    monkeypatch.setattr(mirror_store, "DRIVER_WRITE_ROWS", 0)
    monkeypatch.setattr(mirror_store, "DRIVER_MERGE_ROWS", 0)
    harness = make_harness(tmp_path, spark, instance, tables=TABLES[:1], retain_ranges=1)
    harness.sync()
    chain = [harness.next_range(6) for _ in range(2)]
    store = harness.source.store
    table = harness.source.tables[0]
    mirror_dir = str(local_path(store.location(table.mirror_key.path)))
    versions = lsn_versions(spark, mirror_dir)
    before = store.delta_table(table.mirror_key.path).version()

    _maintain(harness)

    keys = set(store.partition_keys(table.change_log_key.path))
    assert {r.key for r in chain} <= keys
    for lsn, _ in versions:  # every earlier mirror version still reads
        assert read_mirror_as_of(spark, mirror_dir, lsn).count() >= 0
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{mirror_dir}`").collect()[0]
    assert detail["properties"]["delta.logRetentionDuration"] == "interval 604800 seconds"
    operations = {
        r["operation"]
        for r in spark.sql(f"DESCRIBE HISTORY delta.`{mirror_dir}`").collect()
        if r["version"] > before
    }
    assert operations == {"SET TBLPROPERTIES"}, operations  # VACUUM (the driver's) commits none
    assert lsn_versions(spark, mirror_dir) == versions  # the LSNs reached, each at its version
    harness.assert_mirrors_equal_source()
    harness.next_range(6)  # the next range merges into the compacted mirror
    harness.assert_mirrors_equal_source()


def test_maintenance_settings_are_validated(tmp_path: Path) -> None:
    base = {
        "name": "shop",
        "connection": {"emulator": {"path": str(tmp_path / "x.db")}},
    }
    for bad, words in [
        ({"keep_history": "1m"}, "keep at least 10m"),
        ({"keep_history": "week"}, "duration"),
        ({"cron": "hourly"}, "cron"),
        ({"keep_run": "1d"}, "did you mean 'keep_runs'"),
    ]:
        try:
            parse_config(
                {"sources": [{**base, "maintenance": bad}], "storage": {"base_path": "s"}},
                base_dir=tmp_path,
                origin="t",
            )
        except Exception as exc:
            text = str(exc)
            assert words in text and "maintenance" in text and "\n" not in text, text
        else:
            raise AssertionError(f"{bad} was accepted")


def test_a_table_maintenance_cannot_finish_is_one_line_and_the_others_go_on(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose maintenance fails with a Spark error (its JVM stack trace in the text) is
    one line in the run's log: the table, what failed, what happens next; the other tables are
    maintained and the run fails at the end naming it."""
    harness = make_harness(tmp_path, spark, instance, tables=TABLES)
    harness.sync()
    harness.next_range(6)  # the mirrors are built by the first range
    failing = harness.source.tables[0]
    trace = (
        "An error occurred while calling o1234.sql.\n: io.delta.exceptions."
        "ConcurrentDeleteReadException: [DELTA_CONCURRENT_DELETE_READ] a concurrent commit\n"
        "\tat org.apache.spark.sql.delta.ConflictChecker.check(ConflictChecker.scala:1)\n"
    )
    kept: list[str] = []
    real = maintenance.keep_bounded

    def keep_bounded(spark: SparkSession, uri: str, *args: object) -> object:
        if uri == harness.source.store.location(failing.mirror_key.path):
            raise RuntimeError(trace)
        kept.append(uri)
        return real(spark, uri, *args)

    monkeypatch.setattr(maintenance, "keep_bounded", keep_bounded)
    job = harness.defs.resolve_job_def(maintenance_job_name(SOURCE))
    result = execute_request(job, harness.instance, RunRequest())
    assert not result.success
    other = harness.source.tables[1]
    assert harness.source.store.location(other.mirror_key.path) in kept  # the others went on
    errors = [
        e.message
        for e in instance.all_logs(result.run_id)
        if e.level == logging.ERROR and e.message and failing.qualified_name in e.message
    ]
    assert len(errors) == 1, errors
    line = errors[0]
    assert "\n" not in line.strip() and "\tat " not in line and "ConflictChecker" not in line
    assert "DELTA_CONCURRENT_DELETE_READ" in line and "next maintenance run" in line
    assert failing.qualified_name in failure_text(result)
