"""The writer's compaction (:mod:`cdc_assets.spark.compaction`) and the change log's layout: a
table stays within a few files however many ranges commit, every reader sees the same rows
after a compaction, the change data feed and a mirror's LSN history do not see it, a change
log of the old layout is rewritten once, and the maintenance job's commits never lose to the
range runs committing beside them."""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from cdc_assets.lsn import Lsn
from cdc_assets.spark import (
    compaction,
    delta_log,
    key_clustering,
    mirror_versions,
    small_files,
    spark_merges,
)
from cdc_assets.spark import merge_with_deletion_vectors as driver_merge
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.delta_location import local_path
from cdc_assets.spark.driver_merges import again_after_concurrent_commits
from cdc_assets.spark.driver_writes import RowsInDriver
from cdc_assets.spark.partition_rows import PARTITION_COLUMN, PROPERTIES_COLUMN
from cdc_assets.spark.table_maintenance import drop_partitions, keep_bounded
from cdc_assets_tests.spark.change_rows import change_rows, sorted_rows
from cdc_assets_tests.spark.test_merge_with_deletion_vectors import (
    COLUMNS,
    DATA,
    KEYS,
    _merge,
    _random_range,
    _table,
    _value,
)
from cdc_assets_tests.support.outside_spark import (
    multiset,
    read_with_duckdb,
    read_with_query_builder,
)

FANOUT = 3  # files of a level merged into one: small, so that a few commits compact
LOG_SCHEMA = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.StringType())])


@pytest.fixture
def fanout(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(small_files, "FANOUT", FANOUT)
    return FANOUT


def range_key(n: int) -> str:
    """The n-th range's partition key (its LSNs as 20 hex digits, as the sync names them)."""
    return f"{n * 10:020x}-{n * 10 + 10:020x}"


def _live_files(table: Path) -> dict[Any, dict[str, Any]]:
    state = delta_log.read(table)
    assert state is not None
    return state.files


def _commit_actions(table: Path, version: int) -> list[dict[str, Any]]:
    text = delta_log.commit_file(table, version).read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_policy_keeps_files_logarithmic_and_rewrites_each_row_a_few_times() -> None:
    """Thousands of commits of a file each, tiny to large, with the tiered policy applied after
    each (merged files in the place of their group): the files stay within a few per level, a
    byte is written about once per level, consecutive files of a change log are merged
    together, a snapshot's files never with a range's, large files never, and a file whose
    rows are all deleted goes."""
    for ordered in (True, False):
        rng = random.Random(5)
        files: list[small_files.DataFile] = []
        added = written = most = 0
        for n in range(3000):
            size = int(rng.expovariate(1 / 20_000)) + 2_000
            added += size
            files.append(small_files.DataFile(n, size, size // 100, order=(n,)))
            for group in small_files.plan(files, ordered=ordered):
                keys = {f.key for f in group}
                positions = sorted(i for i, f in enumerate(files) if f.key in keys)
                if ordered:  # consecutive in the table's order
                    assert positions == list(range(positions[0], positions[0] + len(group)))
                target = small_files.target_bytes(files)
                assert all(f.live_bytes < small_files.large_bytes(target) for f in group)
                merged = sum(f.size for f in group)
                written += merged
                files = [f for f in files if f.key not in keys]
                order = min(f.order for f in group)
                files.insert(
                    positions[0], small_files.DataFile(("m", n), merged, merged // 100, order=order)
                )
            most = max(most, len(files))
        large = sum(
            f.live_bytes >= small_files.large_bytes(small_files.target_bytes(files)) for f in files
        )
        assert most <= 4 * (small_files.FANOUT - 1) + large + 1, (ordered, most, large)
        assert written / added < 4, (ordered, written / added)
    # a snapshot's files apart from the ranges', a fully deleted file dropped alone
    ranges = [small_files.DataFile(i, 100, 1, order=(i,), sequence=False) for i in range(10)]
    snapshot = [small_files.DataFile(f"s{i}", 100, 1, order=(99,), sequence=True) for i in range(2)]
    gone = small_files.DataFile("gone", 10**9, 10, deleted=10, order=(3,), sequence=False)
    groups = small_files.plan([*ranges, *snapshot, gone], ordered=True)
    assert [g[0].key for g in groups if len(g) == 1] == ["gone"]
    merged = [g for g in groups if len(g) > 1]
    assert merged == [ranges[: small_files.FANOUT]]  # 10 ranges: one group; the snapshot's 2 stay


def _write_range(
    store: AssetStore,
    key: list[str],
    partition: str,
    n: int,
    rows: int = 5,
    spark: SparkSession | None = None,
) -> None:
    """A small range's partition as the change-log step writes it (delta-rs, from the driver;
    ``spark``: by Spark where delta-rs cannot), then the writer's compaction."""
    data = pa.table(
        {"id": pa.array(range(n * 100, n * 100 + rows), pa.int64()), "v": [f"r{n}"] * rows}
    )
    store.write_in_driver(
        spark,  # type: ignore[arg-type]  # None: delta-rs writes it
        RowsInDriver(LOG_SCHEMA, lambda: data),
        key,
        partition,
        lambda _: {"n": n},
    )
    compaction.compact_after_commit(spark, store, key)


def test_a_change_log_stays_within_a_few_files_and_every_partition_reads_the_same(
    tmp_path: Path, fanout: int
) -> None:
    """A snapshot and 60 ranges written as the change-log step writes them, each followed by
    the writer's compaction: the table holds a few files (not one per range), in partition
    order; each partition's rows and properties read as written by the driver's reads, DuckDB
    and delta-rs; a compaction commit is an OPTIMIZE that changes no data; a range written
    again replaces exactly its rows; retired ranges dropped in the driver are gone, the rest
    stays."""
    store = AssetStore(tmp_path)
    key = ["cdc", "t_changes"]
    table = local_path(store.location(key))
    _write_range(store, key, "snapshot", 0, rows=50)
    for n in range(1, 61):
        _write_range(store, key, range_key(n), n)
        assert len(_live_files(table)) <= 3 * (fanout - 1) + 2, n
    names = [f.name for f in store.delta_table(key).schema().fields]
    assert names[:2] == [PARTITION_COLUMN, PROPERTIES_COLUMN]  # statistics kept by every writer
    assert store.delta_table(key).metadata().partition_columns == []
    expected = {range_key(n): [(n * 100 + i, f"r{n}") for i in range(5)] for n in range(1, 61)}
    expected["snapshot"] = [(i, "r0") for i in range(50)]
    for partition, rows in expected.items():
        found = store.rows_in_driver(key, [partition])
        assert found is not None
        assert sorted(tuple(r.values()) for r in found.read().to_pylist()) == rows, partition
        n = 0 if partition == "snapshot" else int(partition[:20], 16) // 10
        assert store.properties(key, partition)["n"] == n
    assert store.partition_keys(key) == sorted(expected)
    everything = Counter(r for rows in expected.values() for r in rows)
    duckdb_rows = read_with_duckdb(str(table), ["id", "v", PROPERTIES_COLUMN])
    assert multiset((i, v) for i, v, p in duckdb_rows if p is None) == everything
    builder_rows = read_with_query_builder(str(table), ["id", "v", PROPERTIES_COLUMN])
    assert multiset((i, v) for i, v, p in builder_rows if p is None) == everything
    optimize = [
        v
        for v in range(store.delta_table(key).version() + 1)
        if any(
            a.get("commitInfo", {}).get("operation") == "OPTIMIZE"
            for a in _commit_actions(table, v)
        )
    ]
    assert optimize
    for version in optimize:  # no data changed: every file action says so
        actions = _commit_actions(table, version)
        moved = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
        assert moved and not any(a["dataChange"] for a in moved)
    # a range written again (a rerun) replaces exactly its rows, wherever compaction put them
    _write_range(store, key, range_key(7), 700, rows=2)
    again = store.rows_in_driver(key, [range_key(7)])
    assert again is not None and sorted(tuple(r.values()) for r in again.read().to_pylist()) == [
        (70000, "r700"),
        (70001, "r700"),
    ]
    neighbour = store.rows_in_driver(key, [range_key(8)])
    assert neighbour is not None and len(neighbour.read()) == 5
    # retired ranges dropped by the maintenance job, in the driver: gone, the others stay
    retired = [range_key(n) for n in range(1, 31)]
    assert drop_partitions(None, str(table), retired) == len(retired)  # type: ignore[arg-type]
    assert store.partition_keys(key) == sorted(set(expected) - set(retired))
    for partition in (range_key(31), range_key(60), "snapshot"):
        found = store.rows_in_driver(key, [partition])
        assert found is not None and len(found.read()) == len(expected[partition])


def test_expired_log_files_go_after_each_checkpoint(tmp_path: Path, fanout: int) -> None:
    """A change log written only from the driver (delta-rs's writes, the compactions'
    commits): after a checkpoint, log files older than the history kept are deleted (none kept
    here), the table still reads."""
    store = AssetStore(tmp_path)
    key = ["cdc", "t_changes"]
    _write_range(store, key, "snapshot", 0)
    table = local_path(store.location(key))
    from cdc_assets.spark.driver_rewrites import set_configuration

    assert set_configuration(table, {"delta.logRetentionDuration": "interval 0 seconds"})
    for n in range(1, 40):
        _write_range(store, key, range_key(n), n)
    log = delta_log.log_folder(table)
    checkpoints = sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.parquet"))
    commits = sorted(int(p.name[:20]) for p in log.glob("*.json"))
    assert checkpoints and commits[0] >= checkpoints[-1] - 1, (checkpoints, commits[:3])
    found = store.rows_in_driver(key, [range_key(39)])
    assert found is not None and len(found.read()) == 5
    assert len(read_with_duckdb(str(table), ["id"])) == 40 * 6  # rows and properties rows


def _feed(spark: SparkSession, uri: str, start: int) -> Counter:
    feed = spark.read.format("delta").option("readChangeFeed", "true")
    rows = feed.option("startingVersion", start).load(uri).select(*COLUMNS, "_change_type")
    return Counter(tuple(r) for r in rows.collect())


def test_a_compacted_mirror_reads_the_same_everywhere_and_keeps_its_feed_and_lsns(
    spark: SparkSession, tmp_path: Path, fanout: int
) -> None:
    """A mirror with deletion vectors merged range by range in the driver, compacted after
    every merge, against a twin that never is: the same rows by Spark, DuckDB, delta-rs's SQL
    and the driver's next merge; the same change data feed across the compactions; the same
    LSNs reached and the same rows as of each; Spark's MERGE after a compaction too."""
    rng = random.Random(8)
    store = AssetStore(tmp_path)
    state = {(k, c): _value(rng, 0) for k in range(0, 60, 2) for c in ("a", "b")}
    compacted, twin = ["compacted"], ["twin"]
    for key in (compacted, twin):
        _table(spark, store, key, state)
    start = store.delta_table(twin).version() + 1
    compactions = 0
    for round_ in range(10):
        at = 100 * (round_ + 1)
        rows, state = _random_range(rng, state, at, rng.randint(1, 12))
        changes = change_rows(spark, rows, DATA)
        for key in (compacted, twin):
            assert _merge(store, spark, key, changes, at) == "driver"
        compactions += compaction.compact_after_commit(spark, store, compacted) is not None
    table = local_path(store.location(compacted))
    assert compactions and len(_live_files(table)) < len(
        _live_files(local_path(store.location(twin)))
    )
    removed_vectors = [
        a["remove"]
        for v in range(start, store.delta_table(compacted).version() + 1)
        for a in _commit_actions(table, v)
        if a.get("remove") and not a["remove"]["dataChange"] and a["remove"].get("deletionVector")
    ]
    assert removed_vectors  # files with deletion vectors were compacted, their rows dropped
    expected = Counter((*k, *v) for k, v in state.items())
    uri, twin_uri = store.location(compacted), store.location(twin)
    assert Counter(tuple(r) for r in store.read(spark, compacted, None).collect()) == expected
    assert multiset(read_with_duckdb(uri, COLUMNS)) == multiset(expected.elements())
    assert multiset(read_with_query_builder(uri, COLUMNS)) == multiset(expected.elements())
    assert _feed(spark, uri, start) == _feed(spark, twin_uri, start)  # OPTIMIZE: no feed rows
    lsns = [lsn for lsn, _ in mirror_versions.lsn_versions(spark, uri)]
    assert lsns == [lsn for lsn, _ in mirror_versions.lsn_versions(spark, twin_uri)]
    for lsn in lsns:
        assert sorted_rows(mirror_versions.read_mirror_as_of(spark, uri, lsn)) == sorted_rows(
            mirror_versions.read_mirror_as_of(spark, twin_uri, lsn)
        ), lsn
    # the next merges, the driver's and Spark's, go into the compacted files
    rows, state = _random_range(rng, state, 5000, 10)
    assert _merge(store, spark, compacted, change_rows(spark, rows, DATA), 5000) == "driver"
    rows, state = _random_range(rng, state, 6000, 10)
    spark_merges.spark_merge_keyed(
        spark,
        store,
        compacted,
        change_rows(spark, rows, DATA),
        key_columns=KEYS,
        snapshot_lsn=None,
        properties={"lsn": Lsn.from_int(6000).hex},
    )
    expected = Counter((*k, *v) for k, v in state.items())
    assert Counter(tuple(r) for r in store.read(spark, compacted, None).collect()) == expected


def test_maintenance_never_loses_to_range_runs_committing_beside_it(
    spark: SparkSession, tmp_path: Path, fanout: int
) -> None:
    """A real race: one thread commits ranges to a change log and a mirror (the writer's
    partition writes and deletion-vector merges, each followed by its compaction) while another
    runs the maintenance job's work on both tables over and over (history retention, retired
    partitions dropped, VACUUM) and compacts them too. Nothing fails, and at the end both hold
    exactly what the ranges wrote."""
    rng = random.Random(4)
    store = AssetStore(tmp_path)
    log_key, mirror_key = ["cdc", "t_changes"], ["mirror", "t_mirror"]
    state = {(k, c): _value(rng, 0) for k in range(0, 40, 2) for c in ("a", "b")}
    _table(spark, store, mirror_key, state)
    _write_range(store, log_key, "snapshot", 0)
    schema = change_rows(spark, [], DATA).schema
    done = threading.Event()
    errors: list[BaseException] = []
    passes = Counter[str]()
    last: dict[str, str] = {}  # the last range written

    def sync() -> None:
        """Ranges as the sync commits them, until the maintenance thread made 3 passes."""
        nonlocal state
        try:
            n = 0
            while n < 20 or passes["maintenance"] < 3:
                n += 1
                rows, state = _random_range(rng, state, 100 * n, rng.randint(1, 8))
                arrow = change_rows(spark, rows, DATA).toArrow()
                _write_range(store, log_key, range_key(n), n, spark=spark)
                merge = functools.partial(
                    driver_merge.deletion_vector_merge_keyed,
                    store,
                    mirror_key,
                    RowsInDriver(schema, lambda arrow=arrow: arrow),
                    key_columns=KEYS,
                    snapshot_lsn=None,
                    properties={"lsn": Lsn.from_int(100 * n).hex},
                )
                # made again in the driver when the maintenance thread took its version
                assert again_after_concurrent_commits(store.location(mirror_key), merge), n
                compaction.compact_after_commit(spark, store, mirror_key)
                passes["ranges"] += 1
            last["key"] = range_key(n)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            done.set()

    def maintain() -> None:
        try:
            while not done.is_set():
                history = 3600.0 * (1 + passes["maintenance"] % 2)  # a property change each pass
                keys = store.partition_keys(log_key)
                retired = [k for k in keys if k != "snapshot"][:-3]
                keep_bounded(spark, store.location(log_key), history, retired)
                keep_bounded(spark, store.location(mirror_key), history)
                for key in (log_key, mirror_key):
                    compaction.compact_after_commit(spark, store, key)
                passes["maintenance"] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sync), threading.Thread(target=maintain)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert passes["maintenance"] >= 3, passes
    expected = Counter((*k, *v) for k, v in state.items())
    assert Counter(tuple(r) for r in store.read(spark, mirror_key, None).collect()) == expected
    kept = [k for k in store.partition_keys(log_key) if k != "snapshot"]
    assert kept and kept == sorted(kept) and kept[-1] == last["key"]
    for partition in kept:
        n = int(partition[:20], 16) // 10
        found = store.rows_in_driver(log_key, [partition])
        assert found is not None and [r["v"] for r in found.read().to_pylist()] == [f"r{n}"] * 5


def test_a_change_log_of_the_old_layout_is_rewritten_once_and_reads_the_same(
    spark: SparkSession, tmp_path: Path, fanout: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A change log as main wrote it (physically partitioned by ``_cdc_partition``, a folder and
    a file per partition): it reads as before; the next range is written into it and the
    writer's compaction rewrites it into one table (saying so in the log), its partitions and
    properties unchanged; later ranges compact as any; the old folders' files go at the next
    VACUUM."""
    store = AssetStore(tmp_path)
    key = ["cdc", "old_changes"]
    uri = store.location(key)
    rows = [("snapshot", None, i, "r0") for i in range(20)] + [("snapshot", '{"n": 0}', None, None)]
    for n in range(1, 12):
        rows += [(range_key(n), None, n * 100 + i, f"r{n}") for i in range(5)]
        rows.append((range_key(n), json.dumps({"n": n, "stored_columns": ["id", "v"]}), None, None))
    old = spark.createDataFrame(
        rows, f"{PARTITION_COLUMN} string, {PROPERTIES_COLUMN} string, id bigint, v string"
    )
    old.select("id", "v", PARTITION_COLUMN, PROPERTIES_COLUMN).write.format("delta").partitionBy(
        PARTITION_COLUMN
    ).save(uri)
    assert store.delta_table(key).metadata().partition_columns == [PARTITION_COLUMN]
    before = {p: sorted_rows(store.read(spark, key, p)) for p in [range_key(3), "snapshot"]}
    assert before[range_key(3)] == [(300 + i, "r3") for i in range(5)]
    assert store.partition_keys(key) == sorted(["snapshot", *(range_key(n) for n in range(1, 12))])
    with caplog.at_level(logging.WARNING, logger="cdc_assets.spark.compaction"):
        _write_range(store, key, range_key(12), 12)
    assert "rewritten from the old layout" in caplog.text
    table = store.delta_table(key)
    assert table.metadata().partition_columns == []
    assert [f.name for f in table.schema().fields][:2] == [PARTITION_COLUMN, PROPERTIES_COLUMN]
    assert len(table.file_uris()) <= 3
    for partition, rows_before in before.items():
        assert sorted_rows(store.read(spark, key, partition)) == rows_before
    assert store.properties(key, range_key(11))["n"] == 11
    assert sorted_rows(store.read(spark, key, range_key(12))) == [
        (1200 + i, "r12") for i in range(5)
    ]
    caplog.clear()
    for n in range(13, 30):
        _write_range(store, key, range_key(n), n)
    assert "old layout" not in caplog.text
    assert len(store.delta_table(key).file_uris()) <= 3 * (fanout - 1) + 2
    # the old layout's folders empty at the maintenance job's next VACUUM (none kept here)
    old_files = list(Path(uri).glob(f"{PARTITION_COLUMN}=*/*.parquet"))
    assert old_files
    done = keep_bounded(spark, uri, 0.0)
    assert done.files_deleted is not None and done.files_deleted >= len(old_files)
    assert not list(Path(uri).glob(f"{PARTITION_COLUMN}=*/*.parquet"))
    two = store.read_partitions(spark, key, [range_key(5), range_key(29)])
    assert sorted(tuple(r) for r in two.collect()) == [
        *((500 + i, "r5") for i in range(5)),
        *((2900 + i, "r29") for i in range(5)),
    ]


def test_a_large_mirror_s_clustered_files_stay_and_its_merges_small_files_are_packed(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mirror rebuilt clustered by key (files of a key range each) takes Spark's MERGEs, each
    adding small files: the compaction after a MERGE packs the small files and leaves the
    clustered ones as they are (a few rows deleted of each); no row changes, no feed row."""
    rows_per_file, rows = 1_000, 4_000  # a clustered file here: 100k rows scaled down
    monkeypatch.setattr(small_files, "ROWS_PER_FILE", rows_per_file)
    monkeypatch.setattr(key_clustering, "ROWS_PER_FILE", rows_per_file)
    monkeypatch.setattr(small_files, "MIN_TARGET_BYTES", 0)  # files here are KBs
    monkeypatch.setattr(small_files, "FANOUT", 4)
    uri = str(tmp_path / "mirror")
    spark.sql(
        f"CREATE TABLE delta.`{uri}` (id BIGINT, v STRING) USING delta TBLPROPERTIES "
        "('delta.enableDeletionVectors' = 'true', 'delta.enableChangeDataFeed' = 'true')"
    )
    frame = spark.range(rows).selectExpr("id", "CAST(id * 7 AS STRING) AS v")
    key_clustering.clustered(frame, ["id"], rows).write.format("delta").mode("append").save(uri)

    def files() -> set[str]:
        return {Path(f).name for f in spark.read.format("delta").load(uri).inputFiles()}

    big = files()
    assert len(big) == rows // 1_000
    for i in range(4):  # each range's MERGE: updates in one key range, inserts past the end
        spark.range(i * 400, i * 400 + 3).union(spark.range(rows + i, rows + i + 1)).selectExpr(
            "id", f"'range {i}' AS v"
        ).createOrReplaceTempView("changes")
        spark.sql(
            f"MERGE INTO delta.`{uri}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    small = files() - big
    assert big <= files() and len(small) >= 4, small  # deletion vectors: nothing rewritten
    expected = sorted(tuple(r) for r in spark.read.format("delta").load(uri).collect())
    version = int(spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]["version"])
    store = AssetStore(tmp_path)
    done = compaction.compact_after_commit(spark, store, ["mirror"])
    assert done is not None and done.how == "driver" and done.files_removed >= 4, done
    after = files()
    assert len(after - big) < 4 and len(small & after) < 4, (small, after - big)
    assert big <= after  # the key-range files stay as they are
    assert sorted(tuple(r) for r in spark.read.format("delta").load(uri).collect()) == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]
    assert history["operation"] == "OPTIMIZE"
    feed = spark.read.format("delta").option("readChangeFeed", "true")
    assert feed.option("startingVersion", version + 1).load(uri).count() == 0
    assert compaction.compact_after_commit(spark, store, ["mirror"]) is None  # nothing left
