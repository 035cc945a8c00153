"""The change feed between two versions of a table, as the mirrors' writers write it (delta-rs's
MERGE, Spark's MERGE, a compaction in between): read in the driver it is the rows Spark's
``readChangeFeed`` gives, each with the LSN its version recorded; a rewrite and a VACUUM make
the reader take the whole table, saying why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdc_assets.spark import table_maintenance
from cdc_assets.spark.change_feed import (
    CHANGE_TYPE,
    COMMIT_VERSION,
    LSN_COLUMN,
    FeedRead,
    changes_since,
)
from cdc_assets.spark.commit_metadata import USER_METADATA_CONF

COLUMNS = ["id", "name"]


def _lsn(n: int) -> str:
    return f"0x{n:020X}"


def _meta(n: int) -> CommitProperties:
    return CommitProperties(custom_metadata={"userMetadata": f'{{"lsn": "{_lsn(n)}"}}'})


def _feed(rows: list[dict]) -> Counter:
    keys = [*COLUMNS, CHANGE_TYPE, COMMIT_VERSION, LSN_COLUMN]
    return Counter(tuple(r[k] for k in keys) for r in rows)


def test_the_feed_read_in_the_driver_is_sparks(tmp_path: Path, spark: SparkSession) -> None:
    uri = str(tmp_path / "mirror")
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    write_deltalake(
        uri,
        first,
        configuration={"delta.enableChangeDataFeed": "true"},
        commit_properties=_meta(1),
    )
    start = FeedRead(DeltaTable(uri).metadata().id, None, 0)
    # delta-rs's MERGE (a small mirror): an update, an insert, a delete
    changes = pa.table({"id": pa.array([2, 4, 3], pa.int64()), "name": ["B", "d", None]})
    (
        DeltaTable(uri)
        .merge(
            changes, "t.id = s.id", source_alias="s", target_alias="t", commit_properties=_meta(2)
        )
        .when_matched_delete("s.name IS NULL")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    # a compaction: no change
    spark.sql(f"OPTIMIZE delta.`{uri}`").collect()
    # Spark's MERGE with deletion vectors (a large mirror)
    spark.sql(
        f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.conf.set(USER_METADATA_CONF, f'{{"lsn": "{_lsn(3)}"}}')
    try:
        spark.sql(
            f"MERGE INTO delta.`{uri}` t USING (SELECT 1L AS id, 'A' AS name UNION ALL "
            "SELECT 5L, 'e') s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        ).collect()
    finally:
        spark.conf.unset(USER_METADATA_CONF)

    found = changes_since(spark, uri, FeedRead(start.table_id, None, 0), what="mirror")
    assert not found.full, found.reason
    assert (found.after_lsn, found.to_lsn) == (_lsn(1), _lsn(3))
    in_driver = found.feed_in_driver(COLUMNS)
    assert in_driver is not None
    by_spark = [r.asDict() for r in found.rows.collect()]
    assert _feed(in_driver.to_pylist()) == _feed(by_spark)
    kinds = Counter((r["id"], r[CHANGE_TYPE], r[LSN_COLUMN]) for r in by_spark)
    assert kinds == Counter(
        {
            (2, "update_preimage", _lsn(2)): 1,
            (2, "update_postimage", _lsn(2)): 1,
            (3, "delete", _lsn(2)): 1,
            (4, "insert", _lsn(2)): 1,
            (1, "update_preimage", _lsn(3)): 1,
            (1, "update_postimage", _lsn(3)): 1,
            (5, "insert", _lsn(3)): 1,
        }
    )
    at = found.read.to

    # a rewrite of the whole table (a rebuild from a snapshot) is not a change since
    consumed = found.read
    spark.range(3).selectExpr("id", "'x' AS name").write.format("delta").mode("overwrite").save(uri)
    rebuilt = changes_since(spark, uri, consumed, what="mirror")
    assert rebuilt.full and "rebuilt" in (rebuilt.reason or ""), rebuilt.reason
    assert sorted(r["id"] for r in rebuilt.rows.collect()) == [0, 1, 2]
    assert rebuilt.read.to > at

    # a VACUUM whose horizon passed the versions since the one consumed
    consumed = rebuilt.read
    spark.sql(f"UPDATE delta.`{uri}` SET name = 'y' WHERE id = 1").collect()
    incremental = changes_since(spark, uri, consumed, what="mirror")
    assert not incremental.full and incremental.rows.count() == 2
    table_maintenance.vacuum(spark, uri, 0)
    vacuumed = changes_since(spark, uri, consumed, what="mirror")
    assert vacuumed.full and "VACUUM" in (vacuumed.reason or ""), vacuumed.reason
    # a first read, and one of a table created anew
    assert "first run" in (changes_since(spark, uri, None, what="mirror").reason or "")
    other = FeedRead("another table", None, consumed.to)
    assert "created anew" in (changes_since(spark, uri, other, what="mirror").reason or "")
