"""A small range merged into a mirror with deletion vectors, in the driver: the vectors are the
bytes Spark writes, the mirror after random ranges equals Spark's MERGE of the same ranges into
a twin (rows, change feed, DuckDB's reading), for keyed and keyless (multiset) mirrors, only
files whose key statistics can hold a changed key are read, and a commit that loses to another
writer commits nothing."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyroaring import BitMap64
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn
from cdc_assets.spark import (
    deletion_vector_files,
    deletion_vectors,
    delta_log,
    mirror_versions,
    spark_merges,
)
from cdc_assets.spark import merge_with_deletion_vectors as driver_merge
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.delta_location import local_path
from cdc_assets.spark.driver_writes import RowsInDriver
from cdc_assets_tests.spark.change_rows import change_rows, lsn, sorted_rows
from cdc_assets_tests.support.outside_spark import read_with_duckdb

DATA = "k int, c string, v string, n bigint, d date"
COLUMNS = ["k", "c", "v", "n", "d"]
KEYS = ["k", "c"]


def _value(rng: random.Random, step: int) -> tuple:
    v = None if rng.random() < 0.2 else f"v{step} – {rng.randrange(1000)}"
    return v, rng.randrange(-(2**40), 2**40), dt.date(2024, 1, 1) + dt.timedelta(days=step)


def _table(spark: SparkSession, store: AssetStore, key: list[str], state: dict) -> None:
    """A mirror as Spark writes a large one: four files, each a range of ``k``, deletion
    vectors and Change Data Feed on (versions 0 and 1)."""
    uri = store.location(key)
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in spark_merges.MIRROR_TABLE_PROPERTIES.items())
    spark.sql(f"CREATE TABLE delta.`{uri}` ({DATA}) USING delta TBLPROPERTIES ({settings})")
    rows = [(*k, *v) for k, v in state.items()]
    frame = spark.createDataFrame(rows, DATA).repartitionByRange(4, "k")
    frame.write.format("delta").mode("append").save(uri)


def _random_range(
    rng: random.Random, state: dict, first_lsn: int, size: int
) -> tuple[list[tuple], dict]:
    """Change rows of ``size`` changes (several per key at times, before images included),
    and the state after them."""
    rows, after = [], dict(state)
    for step in range(size):
        start = first_lsn + step // 3
        key = (rng.randrange(60), rng.choice(["a", "b", "ä"]))
        if key in after and rng.random() < 0.3:
            rows.append((start, 2 * step, 1, *key, *after.pop(key)))
        elif key in after:
            new = _value(rng, first_lsn + step)
            rows.append((start, 2 * step, 3, *key, *after[key]))
            rows.append((start, 2 * step + 1, 4, *key, *new))
            after[key] = new
        else:
            after[key] = _value(rng, first_lsn + step)
            rows.append((start, 2 * step, 2, *key, *after[key]))
    return rows, after


def _merge(store: AssetStore, spark: SparkSession, key: list[str], changes, version: int) -> str:
    """The mirror step's way: in the driver, or Spark's MERGE when that declines; who merged."""
    properties = {"lsn": Lsn.from_int(version).hex}
    arrow = changes.toArrow()
    done = driver_merge.deletion_vector_merge_keyed(
        store,
        key,
        RowsInDriver(changes.schema, lambda: arrow),
        key_columns=KEYS,
        snapshot_lsn=None,
        properties=properties,
    )
    if done is not None:
        assert store.properties(key, None) == properties
        return "driver"
    spark_merges.spark_merge_keyed(
        spark, store, key, changes, key_columns=KEYS, snapshot_lsn=None, properties=properties
    )
    return "spark"


def _feed(spark: SparkSession, store: AssetStore, key: list[str], version: int) -> Counter:
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(store.location(key))
    )
    return Counter(tuple(r) for r in feed.select(*COLUMNS, "_change_type").collect())


@pytest.mark.parametrize("seed", [3])
def test_random_ranges_equal_spark_s_merge(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = AssetStore(tmp_path)
    state = {(k, c): _value(rng, 0) for k in range(0, 60, 2) for c in ("a", "b")}
    driver, twin = ["driver"], ["spark"]
    for key in (driver, twin):
        _table(spark, store, key, state)
    who = []
    for round_ in range(12):
        rows, state = _random_range(rng, state, 100 * (round_ + 1), rng.randint(1, 25))
        changes = change_rows(spark, rows, DATA)
        who.append(_merge(store, spark, driver, changes, 100 * (round_ + 1)))
        spark_merges.spark_merge_keyed(
            spark,
            store,
            twin,
            changes,
            key_columns=KEYS,
            snapshot_lsn=None,
            properties={"lsn": Lsn.from_int(100 * (round_ + 1)).hex},
        )
        expected = sorted(((*k, *v) for k, v in state.items()), key=repr)
        assert sorted_rows(store.read(spark, driver, None)) == expected, round_
        assert sorted_rows(store.read(spark, twin, None)) == expected, round_
        version = store.delta_table(driver).version()
        assert _feed(spark, store, driver, version) == _feed(spark, store, twin, version)
    # every version is the driver's, the tenth with its checkpoint, which the next rounds (and
    # Spark, and DuckDB below) read from
    assert who == ["driver"] * 12, who
    log = local_path(store.location(driver)) / "_delta_log"
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 10
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    expected = Counter((*k, *v) for k, v in state.items())
    assert Counter(read_with_duckdb(store.location(driver), COLUMNS)) == expected
    as_of = mirror_versions.read_mirror_as_of(spark, store.location(driver), Lsn.from_int(350))
    assert sorted_rows(as_of) == sorted_rows(
        spark.read.format("delta").option("versionAsOf", 4).load(store.location(twin))
    )


def test_deletion_vectors_are_the_bytes_spark_writes(spark: SparkSession, tmp_path: Path) -> None:
    store, state = _mirror(spark, tmp_path, 200)
    rows = [(20, i, 1, k, "a", *state[(k, "a")]) for i, k in enumerate((3, 4, 70, 199))]
    spark_merges.spark_merge_keyed(
        spark,
        store,
        ["t"],
        change_rows(spark, rows, DATA),
        key_columns=KEYS,
        snapshot_lsn=None,
        properties={"lsn": Lsn.from_int(20).hex},
    )
    table = local_path(store.location(["t"]))
    log = delta_log.read(table)
    assert log is not None
    vectors = [add["deletionVector"] for add in log.files.values() if add.get("deletionVector")]
    assert sum(v["cardinality"] for v in vectors) == 4
    for descriptor in vectors:
        rows_deleted = deletion_vectors.read(table, descriptor)
        assert len(rows_deleted) == descriptor["cardinality"]
        stored = deletion_vectors.vector_file(table, descriptor["pathOrInlineDv"]).read_bytes()
        start = descriptor["offset"] + 4
        assert (
            deletion_vectors.serialize(rows_deleted)
            == stored[start : start + descriptor["sizeInBytes"]]
        )
        written = deletion_vectors.write(table, [rows_deleted])[0]
        assert deletion_vectors.read(table, written) == rows_deleted
    inline = deletion_vectors.serialize(BitMap64([0, 5, 2**33]))
    padded = inline + b"\0" * (-len(inline) % 4)
    descriptor = {
        "storageType": "i",
        "pathOrInlineDv": deletion_vectors.z85_encode(padded),
        "sizeInBytes": len(inline),
        "cardinality": 3,
    }
    assert list(deletion_vectors.read(table, descriptor)) == [0, 5, 2**33]


def _mirror(spark: SparkSession, tmp_path: Path, keys: int) -> tuple[AssetStore, dict]:
    """A mirror ``t`` of ``keys`` rows (:func:`_table`) and its rows by key."""
    store = AssetStore(tmp_path)
    state = {(k, "a"): (f"v{k}", k, dt.date(2024, 1, 1)) for k in range(keys)}
    _table(spark, store, ["t"], state)
    return store, state


def test_only_files_that_can_hold_a_changed_key_are_read(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = _mirror(spark, tmp_path, 400)
    read: list[Path] = []
    positions = deletion_vector_files.row_positions

    def counted(path, *args):  # type: ignore[no-untyped-def]
        read.append(path)
        return positions(path, *args)

    monkeypatch.setattr(driver_merge, "row_positions", counted)
    rows = [(20, 0, 3, 5, "a", *state[(5, "a")]), (20, 1, 4, 5, "a", "new", 5, dt.date(2025, 1, 1))]
    assert _merge(store, spark, ["t"], change_rows(spark, rows, DATA), 20) == "driver"
    assert len(read) == 1  # of four files
    state[(5, "a")] = ("new", 5, dt.date(2025, 1, 1))
    # a key beyond every file's range: an insert, no file read
    read.clear()
    rows = [(30, 0, 2, 1000, "b", "far", 1, dt.date(2025, 1, 2))]
    assert _merge(store, spark, ["t"], change_rows(spark, rows, DATA), 30) == "driver"
    assert read == []
    state[(1000, "b")] = ("far", 1, dt.date(2025, 1, 2))
    expected = sorted(((*k, *v) for k, v in state.items()), key=repr)
    assert sorted_rows(store.read(spark, ["t"], None)) == expected
    # keys spread over more rows than the driver may read: Spark's to merge
    monkeypatch.setattr(driver_merge, "DRIVER_SCAN_ROWS", 150)
    rows = [(40, 0, 1, 2, "a", *state[(2, "a")]), (40, 1, 1, 398, "a", *state[(398, "a")])]
    assert _merge(store, spark, ["t"], change_rows(spark, rows, DATA), 40) == "spark"
    for gone in ((2, "a"), (398, "a")):
        del state[gone]
    expected = sorted(((*k, *v) for k, v in state.items()), key=repr)
    assert sorted_rows(store.read(spark, ["t"], None)) == expected


def test_a_commit_lost_to_another_writer_commits_nothing(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, state = _mirror(spark, tmp_path, 10)
    uri = store.location(["t"])
    real_read = delta_log.read

    def read_then_another_commit(table: Path):  # type: ignore[no-untyped-def]
        found = real_read(table)
        spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('cdc_test.other' = 'x')")
        return found

    monkeypatch.setattr(driver_merge.delta_log, "read", read_then_another_commit)
    rows = [(20, 0, 1, 3, "a", *state[(3, "a")])]
    changes = change_rows(spark, rows, DATA).toArrow()
    done = driver_merge.deletion_vector_merge_keyed(
        store,
        ["t"],
        RowsInDriver(change_rows(spark, rows, DATA).schema, lambda: changes),
        key_columns=KEYS,
        snapshot_lsn=bytes(lsn(10)),
        properties={"lsn": Lsn.from_int(20).hex},
    )
    assert done is None
    assert store.history(["t"], limit=1)[0]["operation"] != "MERGE"  # the other writer
    expected = sorted(((*k, *v) for k, v in state.items()), key=repr)
    assert sorted_rows(store.read(spark, ["t"], None)) == expected


BAG = "c string, v string, n bigint, f double, d date"  # a keyless table's columns
BAG_COLUMNS = ["c", "v", "n", "f", "d"]


def _bag_row(rng: random.Random) -> tuple:
    """A row of few distinct values (so copies and equal rows are frequent), nulls in every
    column at times."""
    return (
        rng.choice(["a", "b", None]),
        rng.choice(["x", "ä", None]),
        rng.choice([1, 2**40, None]),
        rng.choice([0.5, -1.25, None]),
        rng.choice([dt.date(2024, 1, 1), None]),
    )


def _random_bag_range(rng: random.Random, bag: Counter, first_lsn: int, size: int) -> list[tuple]:
    """Change rows of ``size`` changes to the multiset ``bag`` (changed in place): inserts of
    new and equal rows, deletes of one copy, updates as before and after images."""
    rows = []
    for step in range(size):
        start = first_lsn + step // 2
        held = sorted(bag.elements(), key=repr)
        choice = rng.random()
        if held and choice < 0.3:
            row = rng.choice(held)
            bag[row] -= 1
            rows.append((start, 2 * step, 1, *row))
        elif held and choice < 0.6:
            old, new = rng.choice(held), _bag_row(rng)
            bag[old] -= 1
            bag[new] += 1
            rows.append((start, 2 * step, 3, *old))
            rows.append((start, 2 * step + 1, 4, *new))
        else:
            row = _bag_row(rng)
            bag[row] += 1
            rows.append((start, 2 * step, 2, *row))
    return rows


def _merge_bag(
    store: AssetStore, spark: SparkSession, key: list[str], rows: list[tuple], version: int
) -> Any:
    frame = change_rows(spark, rows, BAG)
    arrow = frame.toArrow()
    return driver_merge.deletion_vector_merge_multiset(
        store,
        key,
        RowsInDriver(frame.schema, lambda: arrow),
        snapshot_lsn=None,
        properties={"lsn": Lsn.from_int(version).hex},
    )


def test_random_keyless_ranges_equal_spark_s_merge(spark: SparkSession, tmp_path: Path) -> None:
    """Random ranges into a keyless mirror (copies, nulls in every column) merged in the driver
    and by Spark's MERGE into a twin: the same rows after every range, the same change feed of
    every version; changes that cancel out commit nothing; a delete of a row the mirror does
    not hold is left to Spark, which fails saying so."""
    rng = random.Random(11)
    store = AssetStore(tmp_path)
    bag = Counter(_bag_row(rng) for _ in range(40))
    driver, twin = ["driver"], ["spark"]
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in spark_merges.MIRROR_TABLE_PROPERTIES.items())
    for key in (driver, twin):
        uri = store.location(key)
        spark.sql(f"CREATE TABLE delta.`{uri}` ({BAG}) USING delta TBLPROPERTIES ({settings})")
        spark.createDataFrame(list(bag.elements()), BAG).repartition(3).write.format("delta").mode(
            "append"
        ).save(uri)
    first = store.delta_table(driver).version() + 1
    for round_ in range(5):
        version = 100 * (round_ + 1)
        rows = _random_bag_range(rng, bag, version, rng.randint(1, 12))
        assert _merge_bag(store, spark, driver, rows, version) is not None, round_
        spark_merges.spark_merge_multiset(
            spark,
            store,
            twin,
            change_rows(spark, rows, BAG),
            snapshot_lsn=None,
            properties={"lsn": Lsn.from_int(version).hex},
        )
        assert Counter(tuple(r) for r in store.read(spark, driver, None).collect()) == +bag
    assert Counter(tuple(r) for r in store.read(spark, twin, None).collect()) == +bag
    newest = store.delta_table(driver).version()
    assert newest == store.delta_table(twin).version() == first + 4
    feeds = [
        Counter(
            tuple(r)
            for r in spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", first)
            .option("endingVersion", newest)
            .load(store.location(key))
            .drop("_commit_timestamp")
            .collect()
        )
        for key in (driver, twin)
    ]
    assert feeds[0] == feeds[1]  # each version's deletes and inserts
    assert Counter(read_with_duckdb(store.location(driver), BAG_COLUMNS)) == +bag

    # an insert and a delete of the same row in one range cancel out: nothing is committed
    newest = store.delta_table(driver).version()
    row = _bag_row(rng)
    done = _merge_bag(store, spark, driver, [(2000, 0, 2, *row), (2000, 1, 1, *row)], 2000)
    assert done is not None and not done.committed and done.version == newest
    assert done.metrics == {"numTargetRowsInserted": 0, "numTargetRowsDeleted": 0}
    # a delete of a row the mirror does not hold: the driver declines, Spark's MERGE refuses
    missing = ("never", "held", 7, 7.0, None)
    assert _merge_bag(store, spark, driver, [(2100, 0, 1, *missing)], 2100) is None
    assert store.delta_table(driver).version() == newest
    with pytest.raises(Exception, match="the changes remove a row the mirror does not hold"):
        spark_merges.spark_merge_multiset(
            spark,
            store,
            driver,
            change_rows(spark, [(2100, 0, 1, *missing)], BAG),
            snapshot_lsn=None,
            properties={"lsn": Lsn.from_int(2100).hex},
        )
