"""Table maintenance (:mod:`cdc_assets.spark.table_maintenance`): VACUUM keeping the history it is
given, and passing over a table with nothing to delete. (Compaction is the writer's:
``test_compaction.py``.)"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from cdc_assets.config import duration_seconds
from cdc_assets.spark import compaction, delta_log, table_maintenance
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.delta_location import local_path
from cdc_assets.spark.driver_writes import RowsInDriver
from cdc_assets_tests.support.outside_spark import read_with_duckdb


@pytest.mark.parametrize("history", ["20m", "90m"])
@pytest.mark.parametrize("by", ["driver", "spark"])
def test_vacuum_keeps_every_version_of_a_history_shorter_than_whole_hours(
    tmp_path: Path, spark: SparkSession, history: str, by: str
) -> None:
    """Delta rounds VACUUM's RETAIN to whole hours: 20 minutes passed as 0.33 h became 0 h and
    deleted the files of every version but the current one. A version written just now stays
    readable after VACUUM with any history of 10 minutes or more, the driver's (a local table)
    or Spark's."""
    uri = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(uri)
    spark.range(100, 103).write.format("delta").mode("overwrite").save(uri)
    if by == "driver":
        done = table_maintenance.keep_bounded(spark, uri, duration_seconds(history))
        assert done.files_deleted == 0  # the driver's: nothing older than the history
    else:
        table_maintenance.keep_bounded_with_spark(spark, uri, duration_seconds(history))
    first = spark.read.format("delta").option("versionAsOf", 0).load(uri)
    assert sorted(r.id for r in first.collect()) == list(range(5))
    assert sorted(r.id for r in spark.read.format("delta").load(uri).collect()) == [100, 101, 102]


def test_a_table_with_nothing_left_to_vacuum_is_passed_over(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Maintenance of a quiet table by Spark (on an object store) is two reads (its history and
    its properties): a second run right after a VACUUM that kept no history finds nothing to
    delete and commits nothing; a write makes the next run work again; so do a different
    history, and a write the last VACUUM had to keep (within the history kept)."""
    uri = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(uri)
    spark.range(3).write.format("delta").mode("overwrite").save(uri)

    def upkeep(seconds: float) -> table_maintenance.TableUpkeep:
        return table_maintenance.keep_bounded_with_spark(spark, uri, seconds)

    first = upkeep(0)
    assert not first.skipped and first.version_after > first.version_before
    second = upkeep(0)
    assert second.skipped
    assert table_maintenance.table_version(spark, uri) == first.version_after  # no commit
    spark.range(3, 4).write.format("delta").mode("append").save(uri)
    assert not upkeep(0).skipped  # the write came after the last VACUUM
    assert upkeep(0).skipped
    hour = upkeep(3600)  # another history: its property set, VACUUM run with it
    assert not hour.skipped and hour.retention_set
    # the write above is within the hour the last VACUUM kept: its files may go later
    assert not upkeep(3600).skipped
    assert sorted(r.id for r in spark.read.format("delta").load(uri).collect()) == [0, 1, 2, 3]


def test_the_driver_s_vacuum_deletes_what_no_version_within_the_history_uses(
    tmp_path: Path,
) -> None:
    """A local change log after ranges and compactions (files removed by them): with an hour
    kept, nothing goes (every removed file's tombstone is recent, even a file written long ago);
    with none kept, every file the current version does not use goes, the change data feed's
    and Hadoop's checksums too, and the table reads the same; hidden files and the log stay; no
    commit is made, no Spark job runs."""
    store = AssetStore(tmp_path)
    key = ["cdc", "t"]
    schema = T.StructType([T.StructField("id", T.LongType())])
    for n in range(12):
        rows = pa.table({"id": pa.array([n], pa.int64())})
        partition = "snapshot" if n == 0 else f"{n:020x}-{n + 1:020x}"
        store.write_in_driver(None, RowsInDriver(schema, lambda rows=rows: rows), key, partition)  # type: ignore[arg-type]
        compaction.compact_after_commit(None, store, key)
    table = local_path(store.location(key))
    state = delta_log.read(table)
    assert state is not None
    live = {table / f for f, _ in state.files}
    data = set(table.glob("*.parquet"))
    assert data > live  # compactions removed files
    (table / "_change_data").mkdir()
    old_feed = table / "_change_data" / "cdc-00000-old.c000.snappy.parquet"
    old_feed.write_bytes(b"x")
    hidden = table / ".hidden-file"
    hidden.write_bytes(b"x")
    long_ago = time.time() - 7200
    for path in [*data, old_feed, hidden]:
        os.utime(path, (long_ago, long_ago))
    removed = sorted(data - live)
    checksum = removed[0].with_name(f".{removed[0].name}.crc")
    checksum.write_bytes(b"x")
    version = delta_log.latest_version(table)

    kept = table_maintenance.keep_bounded(None, str(table), 3600.0)  # type: ignore[arg-type]
    assert kept.files_deleted == 1 and not old_feed.exists()  # the feed's file only: 2 h old
    assert set(table.glob("*.parquet")) == data
    quiet = table_maintenance.keep_bounded(None, str(table), 0.0)  # type: ignore[arg-type]
    assert quiet.files_deleted == len(removed) and not quiet.skipped
    assert set(table.glob("*.parquet")) == live and not checksum.exists() and hidden.exists()
    # the two history settings' commits, nothing else
    assert delta_log.latest_version(table) == version + 2
    again = table_maintenance.keep_bounded(None, str(table), 0.0)  # type: ignore[arg-type]
    assert again.skipped and again.files_deleted == 0
    assert sorted(r[0] for r in read_with_duckdb(str(table), ["id"]) if r[0] is not None) == list(
        range(12)
    )
