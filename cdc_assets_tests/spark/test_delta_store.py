"""The Delta Lake store: partitions replaced idempotently with their properties in the same
commit, gaps recorded in the table, mirrors merged in place (keyed and multiset) and readable as
of an LSN, the old Parquet layout refused."""

from __future__ import annotations

import datetime as dt
import json
import random
import threading
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_assets.lsn import Lsn
from cdc_assets.spark import (
    driver_merges,
    driver_writes,
    mirror_store,
    mirror_versions,
    spark_merges,
)
from cdc_assets.spark.asset_store import AssetStore, OldLayout
from cdc_assets.spark.commit_metadata import USER_METADATA_CONF, NotPublished, to_json
from cdc_assets.spark.driver_writes import RowsInDriver
from cdc_assets.spark.mirror_merge import rows_after_keyed_changes, rows_after_multiset_changes
from cdc_assets_tests.spark.change_rows import change_rows, lsn, sorted_rows


def test_partition_rewrite_replaces_only_that_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = AssetStore(tmp_path)
    key = ["log", "t"]
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
    first = store.write(spark, df, key, "p1", lambda w: {"rows": w.count()})
    store.write(spark, df.where("id = 1"), key, "p2", lambda w: {"rows": w.count()})
    again = store.write(spark, df.where("id = 2"), key, "p1", lambda w: {"rows": w.count()})
    assert sorted_rows(store.read(spark, key, "p1")) == [(2, "b")]
    assert sorted_rows(store.read(spark, key, "p2")) == [(1, "a")]
    assert store.properties(key, "p1") == {
        "rows": 1,
        "write_id": again.properties["write_id"],
        "stored_columns": ["id", "v"],
    }
    assert store.current_version(key, "p1") != first.properties["write_id"]
    # the properties are in the commit that wrote the rows
    history = {h["version"]: h for h in store.history(key)}
    assert json.loads(history[again.version]["userMetadata"])["rows"] == 1
    assert store.properties(key, "p3") is None and not store.is_published(key, "p3")
    # an empty partition is published, with its properties
    store.write(spark, df.where("id = 3"), key, "p3", lambda w: {"rows": w.count()})
    assert store.properties(key, "p3")["rows"] == 0
    assert store.read(spark, key, "p3").count() == 0
    assert sorted_rows(store.read_partitions(spark, key, ["p1", "p2"])) == [(1, "a"), (2, "b")]


def test_an_empty_partition_is_committed_without_spark_and_reads_alike(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A quiet range's partition is its properties row alone, committed by delta-rs: Spark and
    delta-rs read it as Spark's own write would be read, a rerun replaces it, and a column the
    table lacks sends the write to Spark, which adds it."""
    store = AssetStore(tmp_path)
    key = ["log", "t"]
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
    store.write(spark, df, key, "p1", lambda w: {"rows": w.count()})
    quiet = store.write(spark, df.limit(0), key, "p2", lambda w: {"rows": 0}, empty=True)
    history = store.history(key)
    assert str(history[0].get("engineInfo")).startswith("delta-rs"), history[0]
    assert history[0]["version"] == quiet.version == 1
    assert json.loads(history[0]["userMetadata"]) == quiet.properties
    assert store.properties(key, "p2") == {
        "rows": 0,
        "write_id": quiet.properties["write_id"],
        "stored_columns": ["id", "v"],
    }
    assert store.partition_keys(key) == ["p1", "p2"]
    assert store.read(spark, key, "p2").count() == 0
    assert sorted_rows(store.read_partitions(spark, key, ["p1", "p2"])) == [(1, "a"), (2, "b")]
    # a rerun replaces the partition: one properties row, the newer one
    again = store.write(spark, df.limit(0), key, "p2", lambda w: {"rows": 0}, empty=True)
    assert store.current_version(key, "p2") == again.properties["write_id"]
    raw = spark.read.format("delta").load(store.location(key)).where("_cdc_partition = 'p2'")
    assert raw.count() == 1
    # a new column: Spark writes (and adds it), the table stays readable by both
    wider = spark.createDataFrame([], "id int, v string, w double")
    store.write(spark, wider, key, "p3", lambda w: {"rows": 0}, empty=True)
    assert "Spark" in str(store.history(key)[0].get("engineInfo", ""))
    assert store.properties(key, "p3")["stored_columns"] == ["id", "v", "w"]
    assert sorted_rows(store.read(spark, key, "p1")) == [(1, "a"), (2, "b")]


def test_later_columns_let_the_next_empty_partition_skip_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A snapshot written with its ranges' columns (``later_columns``): the table has them,
    null and not among the snapshot's stored columns; the first range without rows is then a
    delta-rs commit (without them it would be a Spark write), and a range with rows reads back
    typed as written (a ``time`` column and a name Delta refuses included)."""
    store = AssetStore(tmp_path)
    key = ["log", "t"]
    snapshot = spark.createDataFrame([(1, "a"), (2, "b")], "id int, v string")
    later = spark.sql(
        "SELECT CAST(1 AS INT) AS id, CAST(NULL AS BINARY) AS `__$start_lsn`, "
        "CAST('10:11:12' AS TIME(6)) AS `at time`"
    )
    store.write(spark, snapshot, key, "snapshot", lambda w: {"rows": 2}, later_columns=later)
    assert store.properties(key, "snapshot")["stored_columns"] == ["id", "v"]
    assert store.read(spark, key, "snapshot").columns == ["id", "v"]
    assert sorted_rows(store.read(spark, key, "snapshot")) == [(1, "a"), (2, "b")]
    quiet = store.write(spark, later.limit(0), key, "r1", lambda w: {"rows": 0}, empty=True)
    assert str(store.history(key)[0].get("engineInfo")).startswith("delta-rs")
    assert quiet.properties["stored_columns"] == ["id", "__$start_lsn", "at_x20_time"]
    assert store.read(spark, key, "r1").count() == 0
    store.write(spark, later, key, "r2", lambda w: {"rows": 1})
    back = store.read(spark, key, "r2")
    assert back.columns == ["id", "__$start_lsn", "at time"]
    assert back.schema["at time"].dataType == later.schema["at time"].dataType
    assert [tuple(r) for r in back.collect()] == [tuple(r) for r in later.collect()]


SOURCE_TYPES = (
    "SELECT CAST(id AS INT) AS id, CAST(id AS TINYINT) AS b, CAST(id AS SMALLINT) AS s, "
    "CAST(id AS BIGINT) AS l, CAST(id / 3 AS FLOAT) AS f, CAST(id / 7 AS DOUBLE) AS d, "
    "CAST(id / 9 AS DECIMAL(38, 6)) AS money, CAST(id AS STRING) AS `odd name`, "
    "CAST(CAST(id AS STRING) AS BINARY) AS bin, DATE'2024-02-29' + CAST(id AS INT) AS day, "
    "TIMESTAMP_NTZ'2024-01-01 10:11:12.123456' + make_interval(0, 0, 0, id) AS local_at, "
    "TIMESTAMP'2024-01-01 10:11:12.654321Z' + make_interval(0, 0, 0, id) AS utc_at, "
    "CAST('10:11:12.5' AS TIME(6)) AS at, id % 2 = 0 AS even FROM range({n})"
)


def _engine(store: AssetStore, key: list[str]) -> str:
    return str(store.history(key, limit=1)[0].get("engineInfo"))


def _raw(spark: SparkSession, store: AssetStore, key: list[str]) -> list[tuple]:
    """Every stored row (the properties row too, but not its text: write ids differ)."""
    table = spark.read.format("delta").load(store.location(key))
    return sorted((tuple(r) for r in table.drop("_cdc_properties").collect()), key=repr)


def test_a_small_new_table_is_created_by_delta_rs_as_spark_would_create_it(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new table of a few rows is committed by delta-rs from the driver: same Delta schema
    (types, nullability, field metadata), partitioning, rows, properties row and userMetadata
    as Spark's writer makes; a later Spark write adds a timestamp_ntz column to it, and a
    mirror created so gets deletion vectors at its first MERGE. Above the size limit, or in a
    table that exists, Spark writes."""
    store = AssetStore(tmp_path)
    rows = spark.sql(SOURCE_TYPES.format(n=4))
    later = spark.sql("SELECT CAST(NULL AS BINARY) AS `__$start_lsn`, 1 AS id")

    def write(key: list[str]) -> None:
        store.write(spark, rows, key, "snapshot", lambda w: {"n": w.count()}, later_columns=later)

    write(["log", "small"])
    assert _engine(store, ["log", "small"]).startswith("delta-rs")
    with monkeypatch.context() as m:
        m.setattr(driver_writes, "DRIVER_WRITE_ROWS", 3)  # 4 rows are too many: Spark writes
        write(["log", "spark"])
    assert "Spark" in _engine(store, ["log", "spark"])
    small, big = store.delta_table(["log", "small"]), store.delta_table(["log", "spark"])
    assert small.schema().to_json() == big.schema().to_json()
    assert small.metadata().partition_columns == big.metadata().partition_columns
    strip = lambda p: {k: v for k, v in p.items() if k != "write_id"}  # noqa: E731
    assert strip(store.properties(["log", "small"], "snapshot")) == strip(
        store.properties(["log", "spark"], "snapshot")
    )
    as_written = [tuple(r) for r in rows.orderBy("id").collect()]
    typed = [(f.name, f.dataType) for f in rows.schema]
    for key in (["log", "small"], ["log", "spark"]):
        back = store.read(spark, key, "snapshot")
        assert [(f.name, f.dataType) for f in back.schema] == typed, key
        assert [tuple(r) for r in back.orderBy("id").collect()] == as_written, key
    assert _raw(spark, store, ["log", "small"]) == _raw(spark, store, ["log", "spark"])

    # a later partition brings a timestamp_ntz column into a table created without one
    key = ["log", "plain"]
    store.write(spark, spark.sql("SELECT 1 AS id"), key, "snapshot", lambda w: {})
    assert "timestampNtz" not in (store.delta_table(key).protocol().writer_features or [])
    store.write(spark, rows.select("id", "local_at"), key, "r1", lambda w: {})
    assert "timestampNtz" in (store.delta_table(key).protocol().writer_features or [])
    assert store.read(spark, key, "r1").schema["local_at"].dataType == T.TimestampNTZType()

    # a small mirror: Change Data Feed from its first version, deletion vectors from its
    # first MERGE; a mirror that exists is rewritten by Spark
    mirror = ["mirror", "t"]
    base = rows.select("id", "`odd name`")
    mirror_store.rebuild(spark, store, mirror, base, {"lsn": Lsn.from_int(10).hex}, 4)
    assert _engine(store, mirror).startswith("delta-rs")
    settings = store.delta_table(mirror).metadata().configuration
    assert settings == {"delta.enableChangeDataFeed": "true"}
    changes = change_rows(spark, [(11, 1, 4, 2, "two")], "id int, `odd name` string")
    published = spark_merges.spark_merge_keyed(
        spark,
        store,
        mirror,
        changes,
        key_columns=["id"],
        snapshot_lsn=bytes(lsn(10)),
        properties={"lsn": Lsn.from_int(11).hex},
    )
    assert published.metrics.get("numTargetDeletionVectorsAdded", 0) >= 1
    assert (
        store.delta_table(mirror).metadata().configuration == spark_merges.MIRROR_TABLE_PROPERTIES
    )
    assert sorted_rows(store.read(spark, mirror, None)) == [
        (0, "0"),
        (1, "1"),
        (2, "two"),
        (3, "3"),
    ]
    assert (
        mirror_versions.read_mirror_as_of(spark, store.location(mirror), Lsn.from_int(10)).count()
        == 4
    )
    mirror_store.rebuild(spark, store, mirror, base, {"lsn": Lsn.from_int(12).hex}, 4)
    assert "Spark" in _engine(store, mirror)
    assert sorted_rows(store.read(spark, mirror, None)) == sorted_rows(base)


def test_rows_read_in_the_driver_are_written_and_read_back_without_spark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``write_in_driver``: ``finalize`` gets the Arrow rows; a new local table is created by
    delta-rs as ``write`` creates it from a frame (columns stored otherwise, time and odd
    names, too), and its partition replaced by delta-rs once it exists. ``rows_in_driver``
    reads a partition back without Spark, typed and named as it was written."""
    store = AssetStore(tmp_path)
    rows = spark.sql(SOURCE_TYPES.format(n=4))
    later = spark.sql("SELECT CAST(NULL AS BINARY) AS `__$start_lsn`, 1 AS id")
    plain = rows.drop("odd name", "at")
    arrow = plain.toArrow()
    given: list[object] = []

    def finalize(written: object) -> dict[str, int]:
        given.append(written)
        assert isinstance(written, pa.Table)
        return {"n": written.num_rows}

    key, twin = ["log", "driver"], ["log", "frame"]
    in_driver = RowsInDriver(plain.schema, lambda: arrow)
    store.write_in_driver(spark, in_driver, key, "snapshot", finalize, later_columns=later)
    assert _engine(store, key).startswith("delta-rs") and len(given) == 1
    store.write(spark, plain, twin, "snapshot", lambda w: {"n": w.count()}, later_columns=later)
    assert store.delta_table(key).schema().to_json() == store.delta_table(twin).schema().to_json()
    assert _raw(spark, store, key) == _raw(spark, store, twin)
    assert store.properties(key, "snapshot")["n"] == 4

    back = store.rows_in_driver(key, ["snapshot"])
    assert back is not None
    assert [(f.name, f.dataType) for f in back.schema] == [
        (f.name, f.dataType) for f in plain.schema
    ]
    assert back.read().sort_by("id").to_pylist() == arrow.sort_by("id").to_pylist()

    odd, odd_twin = ["log", "odd"], ["log", "odd_frame"]
    odd_rows = rows.toArrow()
    in_driver = RowsInDriver(rows.schema, lambda: odd_rows)
    store.write_in_driver(spark, in_driver, odd, "snapshot", finalize, later_columns=later)
    assert _engine(store, odd).startswith("delta-rs")  # time as text, an escaped name
    store.write(spark, rows, odd_twin, "snapshot", lambda w: {"n": 4}, later_columns=later)
    schemas = [store.delta_table(k).schema().to_json() for k in (odd, odd_twin)]
    assert schemas[0] == schemas[1]
    assert _raw(spark, store, odd) == _raw(spark, store, odd_twin)
    assert sorted_rows(store.read(spark, odd, "snapshot")) == sorted_rows(rows)
    back = store.rows_in_driver(odd, ["snapshot"])
    assert back is not None
    typed = [(f.name, f.dataType) for f in rows.schema]
    assert [(f.name, f.dataType) for f in back.schema] == typed
    assert back.read().sort_by("id").to_pylist() == odd_rows.sort_by("id").to_pylist()

    # the table exists: delta-rs replaces the partition with the driver's rows
    two = RowsInDriver(plain.schema, lambda: arrow.slice(0, 2))
    store.write_in_driver(spark, two, key, "snapshot", finalize)
    assert _engine(store, key).startswith("delta-rs")
    assert _raw(spark, store, key) != _raw(spark, store, twin)
    assert sorted(r["id"] for r in store.read(spark, key, "snapshot").collect()) == [0, 1]
    assert store.properties(key, "snapshot")["n"] == 2


def _reads_through_delta(df: DataFrame) -> bool:
    plan = df._jdf.queryExecution().sparkPlan().toString()
    return "DeltaFileIndex" in plan or "TahoeLogFileIndex" in plan


def test_partitions_are_read_as_their_files_unless_delta_must_read_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A partition read goes to the Parquet files the log lists for it (no Delta scan) and
    gives what Delta's reader gives; a table with a reader feature that plain Parquet reads
    would miss is read through Delta."""
    store = AssetStore(tmp_path)
    key = ["log", "t"]
    df = spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id int, v string")
    store.write(spark, df, key, "p1", lambda w: {"rows": 3})
    store.write(spark, df.where("id = 1").withColumn("w", F.lit(1.5)), key, "p2", lambda w: {})
    for partitions in (["p1"], ["p2"], ["p1", "p2"], ["p9"]):
        fast = store.read_partitions(spark, key, partitions)
        assert not _reads_through_delta(fast), partitions
        plain = store._partition_rows(
            spark.read.format("delta").load(store.location(key)), key, partitions
        )
        assert _reads_through_delta(plain)
        assert fast.schema == plain.schema, partitions
        assert sorted_rows(fast) == sorted_rows(plain), partitions
    assert sorted_rows(store.read(spark, key, "p2")) == [(1, "a", 1.5)]

    # a reader feature beyond timestamp_ntz (here: variant columns): Delta's reader reads it
    other = ["log", "variant"]
    variant = spark.sql("""SELECT 1 AS id, parse_json('{"a": 1}') AS v""")
    store.write(spark, variant, other, "p1", lambda w: {})
    assert "variantType" in (store.delta_table(other).protocol().reader_features or [])
    through = store.read(spark, other, "p1")
    assert _reads_through_delta(through)
    assert [(r.id, str(r.v)) for r in through.collect()] == [(1, '{"a":1}')]


def test_the_properties_describe_the_rows_committed(spark: SparkSession, tmp_path: Path) -> None:
    """The rows are read once: ``finalize`` and the write see the same rows, also when a
    second read would give others (a fuzzy snapshot; here a column that differs per read)."""
    store = AssetStore(tmp_path)
    draw = F.udf(lambda _: random.random(), "double").asNondeterministic()
    df = spark.range(200).withColumn("r", draw("id"))
    assert df.agg(F.sum("r")).first()[0] != df.agg(F.sum("r")).first()[0]  # it does differ

    def finalize(written: DataFrame) -> dict:
        return {"sum": written.agg(F.sum("r")).first()[0]}

    published = store.write(spark, df, ["t"], "p", finalize)
    stored = store.read(spark, ["t"], "p").agg(F.sum("r")).first()[0]
    assert published.properties["sum"] == pytest.approx(stored, rel=1e-12)


def test_a_refusing_finalize_commits_nothing(spark: SparkSession, tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    df = spark.createDataFrame([(1,)], "id int")
    store.write(spark, df, ["t"], "p", lambda w: {"rows": 1})
    before = len(store.history(["t"]))

    def refuse(written: DataFrame) -> dict:
        raise ValueError("coverage lost")

    with pytest.raises(ValueError, match="coverage lost"):
        store.write(spark, df.union(df), ["t"], "p", refuse)
    assert len(store.history(["t"])) == before
    assert store.read(spark, ["t"], "p").count() == 1


def test_gap_is_recorded_in_the_table_and_cleared(spark: SparkSession, tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    key = ["log", "t"]
    store.write(spark, spark.createDataFrame([(1,)], "id int"), key, "snapshot", lambda w: {})
    store.mark_gap(spark, key, "r1", {"reason": "cleanup"})
    assert store.gap(key, "r1") == {"reason": "cleanup"}
    assert not store.is_published(key, "r1")
    store.clear_gap(spark, key, "r1")
    assert store.gap(key, "r1") is None
    assert store.is_published(key, "snapshot")


def test_time_columns_and_odd_names_round_trip(spark: SparkSession, tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    df = spark.sql("SELECT 1 AS `line no`, CAST('12:34:56.123456' AS TIME(6)) AS at")
    store.write(spark, df, ["t"], "p")
    back = store.read(spark, ["t"], "p")
    assert back.schema["at"].dataType == df.schema["at"].dataType
    assert back.collect()[0]["at"] == dt.time(12, 34, 56, 123456)
    # the names as they were, and no trace of how they were stored
    assert [(f.name, f.metadata) for f in back.schema.fields] == [("line no", {}), ("at", {})]


def test_old_parquet_layout_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "mirror" / "t" / "__all__").mkdir(parents=True)
    (tmp_path / "mirror" / "t" / "__all__" / "_CURRENT").write_text("v-1")
    store = AssetStore(tmp_path)
    with pytest.raises(OldLayout, match="move the storage directory away"):
        store.properties(["mirror", "t"], None)
    with pytest.raises(OldLayout):
        store.read(spark, ["mirror", "t"], None)


def test_keyed_merge_matches_the_reference_and_reads_as_of_lsn(
    spark: SparkSession, tmp_path: Path
) -> None:
    store = AssetStore(tmp_path)
    key = ["mirror", "t"]
    base = spark.createDataFrame([(i, f"v{i}") for i in range(6)], "id int, v string")
    mirror_store.rebuild(spark, store, key, base, {"lsn": Lsn.from_int(10).hex})
    changes = change_rows(
        spark,
        [
            (11, 1, 1, 0, "v0"),  # delete 0
            (11, 2, 4, 1, "x1"),  # update 1
            (12, 1, 2, 9, "n9"),  # insert 9
            (12, 2, 1, 9, "n9"),  # ... and delete it again
            (13, 1, 2, 7, "n7"),  # insert 7
            (9, 1, 4, 2, "old"),  # at or below the snapshot: ignored
        ],
        "id int, v string",
    )
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=["id"], snapshot_lsn=lsn(10))
    )
    published = spark_merges.spark_merge_keyed(
        spark,
        store,
        key,
        changes,
        key_columns=["id"],
        snapshot_lsn=bytes(lsn(10)),
        properties={"lsn": Lsn.from_int(13).hex},
    )
    uri = store.location(key)
    assert sorted_rows(store.read(spark, key, None)) == expected
    assert store.properties(key, None) == {"lsn": Lsn.from_int(13).hex}
    assert published.metrics.get("numTargetRowsDeleted") == 1
    assert published.metrics.get("numTargetRowsUpdated") == 1
    # deletion vectors: the update and delete did not rewrite the table's file
    assert published.metrics.get("numTargetDeletionVectorsAdded", 0) >= 1
    as_of_12 = mirror_versions.read_mirror_as_of(spark, uri, Lsn.from_int(12))
    assert sorted_rows(as_of_12) == sorted_rows(base)
    assert sorted_rows(mirror_versions.read_mirror_as_of(spark, uri, Lsn.from_int(13))) == expected
    with pytest.raises(NotPublished):
        mirror_versions.read_mirror_as_of(spark, uri, Lsn.from_int(9))
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", published.version)
        .load(uri)
    )
    assert {r["_change_type"] for r in feed.collect()} >= {"delete", "insert", "update_postimage"}


@pytest.mark.parametrize("seed", range(3))
def test_a_small_keyed_merge_in_the_driver_equals_spark_s(
    spark: SparkSession, tmp_path: Path, seed: int
) -> None:
    """A small mirror created by delta-rs takes a range's changes by a delta-rs MERGE in the
    driver: the same rows as Spark's MERGE into a twin, its LSN in the commit (as-of reads),
    Spark's metric names, a change feed Spark reads; a mirror with deletion vectors is
    Spark's to merge (None, nothing committed)."""
    rng = random.Random(seed)
    store = AssetStore(tmp_path)
    data = "id int, `Name` string, qty decimal(12,2)"
    base = spark.createDataFrame([(i, f"n{i}", dt_decimal(i)) for i in range(0, 20, 2)], data)
    rows, state = [], {i: (f"n{i}", dt_decimal(i)) for i in range(0, 20, 2)}
    for step in range(30):
        k = rng.randrange(24)
        op = 1 if k in state and rng.random() < 0.3 else 4 if k in state else 2
        value = (f"s{step}", dt_decimal(step))
        rows.append((11 + step // 5, step, op, k, *(state.get(k, value) if op == 1 else value)))
        if op == 1:
            state.pop(k)
        else:
            state[k] = value
    changes = change_rows(spark, rows, data)
    keys = ["driver"], ["spark"]
    for key in keys:
        mirror_store.rebuild(spark, store, key, base, {"lsn": Lsn.from_int(10).hex}, 10)
        assert _engine(store, key).startswith("delta-rs")
    properties = {"lsn": Lsn.from_int(20).hex}
    in_driver = RowsInDriver(changes.schema, changes.toArrow)
    published = driver_merges.driver_merge_keyed(
        store,
        ["driver"],
        in_driver,
        key_columns=["id"],
        snapshot_lsn=bytes(lsn(10)),
        properties=properties,
        mirror_rows=10,
        change_rows=30,
    )
    assert published is not None and published.user_metadata == to_json(properties)
    twin = spark_merges.spark_merge_keyed(
        spark,
        store,
        ["spark"],
        changes,
        key_columns=["id"],
        snapshot_lsn=bytes(lsn(10)),
        properties=properties,
    )
    expected = sorted(((k, *v) for k, v in state.items()), key=repr)
    for key in keys:
        assert sorted_rows(store.read(spark, key, None)) == expected, key
    for name in ("numTargetRowsInserted", "numTargetRowsDeleted"):
        assert published.metrics[name] == twin.metrics[name], name
    assert _engine(store, ["driver"]).startswith("delta-rs")
    uri = store.location(["driver"])
    assert "enableDeletionVectors" not in str(
        store.delta_table(["driver"]).metadata().configuration
    )
    as_of = mirror_versions.read_mirror_as_of(spark, uri, Lsn.from_int(15))
    assert sorted_rows(as_of) == sorted_rows(base)
    assert sorted_rows(mirror_versions.read_mirror_as_of(spark, uri, Lsn.from_int(20))) == expected
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", published.version)
        .load(uri)
    )
    assert {r["_change_type"] for r in feed.collect()} >= {"insert", "update_postimage"}

    # the Spark-merged twin has deletion vectors now: not delta-rs's to merge, the driver
    # writes deletion vectors (the same changes again leave the same rows)
    again = driver_merges.driver_merge_keyed(
        store,
        ["spark"],
        in_driver,
        key_columns=["id"],
        snapshot_lsn=bytes(lsn(10)),
        properties={"lsn": Lsn.from_int(21).hex},
        mirror_rows=10,
        change_rows=30,
    )
    assert again is not None and _engine(store, ["spark"]).startswith("cdc_assets")
    assert sorted_rows(store.read(spark, ["spark"], None)) == expected
    assert store.properties(["spark"], None) == {"lsn": Lsn.from_int(21).hex}


def dt_decimal(n: int) -> Decimal:
    return (Decimal(n) / 4).quantize(Decimal("0.01"))


def test_multiset_merge_matches_the_reference(spark: SparkSession, tmp_path: Path) -> None:
    store = AssetStore(tmp_path)
    key = ["mirror", "k"]
    base = spark.createDataFrame([("a",), ("a",), ("b",), (None,)], "v string")
    mirror_store.rebuild(spark, store, key, base, {"lsn": Lsn.from_int(1).hex})
    changes = change_rows(
        spark,
        [(2, 1, 1, "a"), (2, 2, 2, "c"), (2, 3, 2, "c"), (3, 1, 3, "b"), (3, 2, 4, None)],
        "v string",
    )
    expected = sorted_rows(rows_after_multiset_changes(base, changes))
    spark_merges.spark_merge_multiset(
        spark, store, key, changes, snapshot_lsn=None, properties={"lsn": Lsn.from_int(3).hex}
    )
    assert sorted_rows(store.read(spark, key, None)) == expected
    assert expected == sorted_rows(
        spark.createDataFrame([(None,), (None,), ("a",), ("c",), ("c",)], "v string")
    )
    too_many = change_rows(spark, [(4, 1, 1, "z")], "v string")
    with pytest.raises(Exception, match="keyless merge"):
        spark_merges.spark_merge_multiset(
            spark, store, key, too_many, snapshot_lsn=None, properties={"lsn": "x"}
        )
    assert sorted_rows(store.read(spark, key, None).select(F.col("v"))) == expected


def test_merges_from_several_threads_commit_their_own_lsn(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Two driver threads merge two mirrors at once: each commit carries its own properties
    (``userMetadata`` is a session conf: each MERGE gets a session of its own)."""
    store = AssetStore(tmp_path)
    base = spark.createDataFrame([(i, f"v{i}") for i in range(4)], "id int, v string")
    for name in ("a", "b"):
        mirror_store.rebuild(spark, store, ["mirror", name], base, {"lsn": Lsn.from_int(1).hex})
    errors: list[BaseException] = []

    def merge(name: str, lsn: int) -> None:
        try:
            changes = change_rows(spark, [(lsn, 1, 4, 1, name)], "id int, v string")
            spark_merges.spark_merge_keyed(
                spark,
                store,
                ["mirror", name],
                changes,
                key_columns=["id"],
                snapshot_lsn=None,
                properties={"lsn": Lsn.from_int(lsn).hex},
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=merge, args=a) for a in (("a", 5), ("b", 7))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert store.properties(["mirror", "a"], None) == {"lsn": Lsn.from_int(5).hex}
    assert store.properties(["mirror", "b"], None) == {"lsn": Lsn.from_int(7).hex}
    assert store.read(spark, ["mirror", "b"], None).where("id = 1").collect()[0]["v"] == "b"
    assert spark.conf.get(USER_METADATA_CONF, None) is None  # the caller's session is untouched
