"""Table maintenance (:mod:`cdc_assets.spark.table_maintenance`): compaction of a mirror's small
files, and VACUUM keeping the history it is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_assets.config import duration_seconds
from cdc_assets.spark import key_clustering, table_maintenance

ROWS = 4_000
ROWS_PER_FILE = 1_000  # a clustered file here: the module's 100k rows scaled down


def _files(spark: SparkSession, uri: str) -> set[str]:
    return {Path(f).name for f in spark.read.format("delta").load(uri).inputFiles()}


def _rows(spark: SparkSession, uri: str) -> list[tuple[int, str]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(uri).collect())


def test_compaction_packs_the_merges_small_files_and_keeps_the_clustered_ones(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_maintenance, "ROWS_PER_FILE", ROWS_PER_FILE)
    monkeypatch.setattr(key_clustering, "ROWS_PER_FILE", ROWS_PER_FILE)
    monkeypatch.setattr(table_maintenance, "MIN_TARGET_BYTES", 0)  # files here are KBs
    uri = str(tmp_path / "mirror")
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, v STRING) USING delta TBLPROPERTIES "
        "('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true')"
    )
    rows = spark.range(ROWS).selectExpr("id", "CAST(id * 7 AS STRING) AS v")
    key_clustering.clustered(rows, ["id"], ROWS).write.format("delta").mode("append").save(uri)
    big = _files(spark, uri)
    assert len(big) == ROWS // ROWS_PER_FILE
    for i in range(8):  # each range's MERGE: updates in one key range, inserts past the end
        spark.range(i * 400, i * 400 + 3).union(spark.range(ROWS + i, ROWS + i + 1)).selectExpr(
            "id", f"'range {i}' AS v"
        ).createOrReplaceTempView("changes")
        spark.sql(
            f"MERGE INTO delta.`{uri}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    small = _files(spark, uri) - big
    # every MERGE rewrote nothing (deletion vectors): the clustered files are all still read
    assert big <= _files(spark, uri) and len(small) >= 8, small
    expected = _rows(spark, uri)
    version = table_maintenance.table_version(spark, uri)

    monkeypatch.setattr(table_maintenance, "COMPACT_AT", len(small) + 1)
    assert table_maintenance.compact(spark, uri) == 0  # too few small files: nothing done
    assert table_maintenance.table_version(spark, uri) == version

    monkeypatch.setattr(table_maintenance, "COMPACT_AT", 4)
    spark.conf.set(table_maintenance.OPTIMIZE_MAX_FILE_SIZE, "12345678")  # the session's own
    try:
        replaced = table_maintenance.compact(spark, uri)
        # the table's target sizes were the OPTIMIZE's only: the session's settings are back
        assert spark.conf.get(table_maintenance.OPTIMIZE_MAX_FILE_SIZE) == "12345678"
        assert spark.conf.get(table_maintenance.OPTIMIZE_MIN_FILE_SIZE, None) is None
    finally:
        spark.conf.unset(table_maintenance.OPTIMIZE_MAX_FILE_SIZE)
    after = _files(spark, uri)
    assert replaced >= len(small), (replaced, small)
    assert not small & after  # the small files are gone from the current version ...
    assert len(after - big) < len(small) // 2, after - big  # ... packed into a few
    assert big <= after  # a few rows deleted of each: the key-range files stay as they are
    assert _rows(spark, uri) == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]
    assert history["operation"] == "OPTIMIZE"
    # no data changed: the change data feed since the last MERGE is empty
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version + 1)
        .load(uri)
    )
    assert feed.count() == 0
    assert table_maintenance.compact(spark, uri) == 0  # compacted: nothing more to do


@pytest.mark.parametrize("history", ["20m", "90m"])
def test_vacuum_keeps_every_version_of_a_history_shorter_than_whole_hours(
    tmp_path: Path, spark: SparkSession, history: str
) -> None:
    """Delta rounds VACUUM's RETAIN to whole hours: 20 minutes passed as 0.33 h became 0 h and
    deleted the files of every version but the current one. A version written just now stays
    readable after VACUUM with any history of 10 minutes or more."""
    uri = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(uri)
    spark.range(100, 103).write.format("delta").mode("overwrite").save(uri)
    table_maintenance.keep_bounded(spark, uri, duration_seconds(history))
    first = spark.read.format("delta").option("versionAsOf", 0).load(uri)
    assert sorted(r.id for r in first.collect()) == list(range(5))
    assert sorted(r.id for r in spark.read.format("delta").load(uri).collect()) == [100, 101, 102]


def test_a_table_with_nothing_left_to_vacuum_is_passed_over(
    tmp_path: Path, spark: SparkSession
) -> None:
    """Maintenance of a quiet table is two reads (its history and its properties): a second
    run right after a VACUUM that kept no history finds nothing to delete and commits
    nothing; a write makes the next run work again; so do a different history, and a write
    the last VACUUM had to keep (within the history kept)."""
    uri = str(tmp_path / "table")
    spark.range(5).write.format("delta").save(uri)
    spark.range(3).write.format("delta").mode("overwrite").save(uri)

    def upkeep(seconds: float) -> table_maintenance.TableUpkeep:
        return table_maintenance.keep_bounded(spark, uri, seconds)

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
