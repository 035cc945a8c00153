"""The driver's paths over the demo's own tables (every SQL Server type the project maps, ``time``
columns, names with a space), read from the emulator in the driver as a small table's snapshot
and ranges are: a change log written by delta-rs and read back in the driver, a mirror created
and merged by delta-rs, a mirror with deletion vectors merged in the driver. Each runs no Spark
job and makes what Spark's write or MERGE makes of the same rows: the same Delta schema (field
metadata included), the rows Spark reads, the change data feed, DuckDB's and delta-rs's
readings; and Spark's later writes and MERGEs into the tables the driver wrote work."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import (
    delta_log,
    driver_merges,
    driver_writes,
    history_driver,
    history_store,
    mirror_store,
    mirror_versions,
    spark_merges,
    sqlserver_source,
    table_maintenance,
)
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.delta_location import local_path
from cdc_assets.spark.driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from cdc_assets.spark.stored_columns import STORED_NAME, STORED_TYPE
from cdc_assets.sqlserver import discover, get_max_lsn
from cdc_assets.workload import DEMO_TABLES, TableDef, create_demo_database
from cdc_assets_tests.support.outside_spark import (
    multiset,
    read_with_duckdb,
    read_with_query_builder,
)
from cdc_assets_tests.support.spark_jobs import newest_job

ROWS = 30  # rows per demo table
STEPS = 40  # workload transactions per range
KEYED = [t.name for t in DEMO_TABLES if t.has_key]


@dataclass(frozen=True)
class DemoTable:
    """A demo table as the driver reads it: its snapshot (marker rows included) and three
    ranges of change rows, each as Arrow with its Spark schema."""

    table: TableDef
    snapshot_schema: StructType
    snapshot: pa.Table
    replay_from: bytes
    change_schema: StructType
    ranges: list[tuple[str, pa.Table]]

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def snapshot_rows(self) -> RowsInDriver:
        return RowsInDriver(self.snapshot_schema, lambda: self.snapshot)

    def changes(self, index: int) -> RowsInDriver:
        rows = self.ranges[index][1]
        return RowsInDriver(self.change_schema, lambda: rows)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DemoTable]:
    path = tmp_path_factory.mktemp("demo") / "source.db"
    conn = emulator.connect(str(path), autocommit=True)
    try:
        workload = create_demo_database(conn, seed=7, rows_per_table=ROWS, polling_interval=None)
        _scan(path)
        settings = EmulatorSettings(path=path)
        catalog = discover(conn)
        instances = {t.name: catalog[(t.schema, t.name)].current_instance for t in DEMO_TABLES}
        plans = {
            name: sqlserver_source.plan_snapshot(settings, instance, mode="exact")
            for name, instance in instances.items()
            if instance is not None
        }
        snapshots = {n: sqlserver_source.read_snapshot_in_driver(p) for n, p in plans.items()}
        ranges: dict[str, list[tuple[str, pa.Table]]] = {n: [] for n in instances}
        for _ in range(3):
            lo = get_max_lsn(conn)
            for _ in range(STEPS):
                workload.step()
            _scan(path)
            lsn_range = LsnRange(lo, get_max_lsn(conn))
            for name, instance in instances.items():
                assert instance is not None
                rows = sqlserver_source.read_changes_in_driver(settings, instance, lsn_range)
                ranges[name].append((lsn_range.key, rows))
    finally:
        conn.close()
    found = {}
    for table in DEMO_TABLES:
        instance = instances[table.name]
        assert instance is not None
        replay_from, _, _ = sqlserver_source.snapshot_summary(snapshots[table.name])
        found[table.name] = DemoTable(
            table,
            sqlserver_source.snapshot_frame_schema(plans[table.name]),
            snapshots[table.name],
            replay_from.raw,
            sqlserver_source.change_frame_schema(instance),
            ranges[table.name],
        )
    # every table changed in each of the first two ranges (the seed says so)
    for demo_table in found.values():
        assert all(rows.num_rows for _, rows in demo_table.ranges[:2]), demo_table.table.name
    return found


def _scan(path: Path) -> None:
    while emulator.scan(str(path)) > 0:
        pass


def _in_driver(spark: SparkSession, work: Callable[[], Any]) -> Any:
    """``work()``, asserted to run no Spark job."""
    before = newest_job(spark)
    done = work()
    assert newest_job(spark) == before, "a driver path ran Spark jobs"
    return done


def _by_spark(monkeypatch: pytest.MonkeyPatch, work: Callable[[], Any]) -> Any:
    """``work()`` with Spark writing every table, however small."""
    with monkeypatch.context() as m:
        m.setattr(driver_writes, "DRIVER_WRITE_ROWS", 0)
        return work()


def _engine(store: AssetStore, key: list[str]) -> str:
    return str(store.history(key, limit=1)[0].get("engineInfo"))


def _schema(store: AssetStore, key: list[str]) -> dict[str, Any]:
    """The table's Delta schema as its log holds it (the newest metaData action)."""
    state = delta_log.read(local_path(store.location(key)))
    assert state is not None
    return json.loads(state.metadata["schemaString"])


def _frame(spark: SparkSession, rows: RowsInDriver) -> DataFrame:
    """The driver's rows as a Spark frame (what Spark's paths are given)."""
    return spark.createDataFrame(rows.read(), rows.schema)


def _spark_rows(df: DataFrame) -> Any:
    return multiset(tuple(r) for r in df.collect())


def _arrow_rows(rows: pa.Table) -> Any:
    return multiset(tuple(r.values()) for r in rows.to_pylist())


def _outside_spark(store: AssetStore, key: list[str], columns: list[str]) -> tuple[Any, Any]:
    uri = store.location(key)
    return multiset(read_with_duckdb(uri, columns)), multiset(read_with_query_builder(uri, columns))


def _feed(spark: SparkSession, store: AssetStore, key: list[str], first: int, last: int) -> Any:
    """The change data feed of versions ``first`` to ``last``: rows, change types, versions."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", last)
        .load(store.location(key))
        .drop("_commit_timestamp")
    )
    return _spark_rows(feed)


@pytest.mark.parametrize("name", [t.name for t in DEMO_TABLES])
def test_a_change_log_written_and_read_in_the_driver_equals_spark_s(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    demo: dict[str, DemoTable],
    name: str,
) -> None:
    table = demo[name]
    store = AssetStore(tmp_path)
    driver, twin = ["cdc", "driver"], ["cdc", "spark"]
    later = spark.createDataFrame([], table.change_schema)  # a snapshot's ranges' columns

    def finalize(rows: object) -> dict[str, str]:
        return {"kind": "test"}

    # the snapshot: a new table, created by delta-rs
    snapshot = table.snapshot_rows()
    _in_driver(
        spark,
        lambda: store.write_in_driver(
            spark, snapshot, driver, "snapshot", finalize, later_columns=later
        ),
    )
    assert _engine(store, driver).startswith("delta-rs")
    frame = _frame(spark, snapshot)
    _by_spark(
        monkeypatch,
        lambda: store.write(spark, frame, twin, "snapshot", finalize, later_columns=later),
    )
    assert "Spark" in _engine(store, twin)
    stored = _schema(store, driver)
    assert stored == _schema(store, twin)
    metadata = [f["metadata"] for f in stored["fields"]]
    assert any(STORED_NAME in m for m in metadata) == (" " in "".join(table.columns))
    has_time = any(c.base_type == "time" for c in table.table.columns)
    assert any(STORED_TYPE in m for m in metadata) == has_time

    # a range into the table: its partition replaced by delta-rs
    key = table.ranges[0][0]
    changes = table.changes(0)
    _in_driver(spark, lambda: store.write_in_driver(spark, changes, driver, key, finalize))
    assert _engine(store, driver).startswith("delta-rs")
    store.write(spark, _frame(spark, changes), twin, key, finalize)
    assert _schema(store, driver) == _schema(store, twin)

    # a later range written by Spark into the table delta-rs wrote
    later_key = table.ranges[1][0]
    for target in (driver, twin):
        store.write(spark, _frame(spark, table.changes(1)), target, later_key, finalize)
    assert "Spark" in _engine(store, driver)
    assert _schema(store, driver) == _schema(store, twin)

    for partition, written in (("snapshot", snapshot), (key, changes)):
        # Spark reads the partition typed and named as the source has it
        for target in (driver, twin):
            assert store.read(spark, target, partition).schema == written.schema, partition
        # the driver reads it back as it was written, from either table
        for target in (driver, twin):
            back = _in_driver(spark, lambda t=target, p=partition: store.rows_in_driver(t, [p]))
            assert back is not None and back.schema == written.schema, partition
            got = _in_driver(spark, back.read)
            assert _arrow_rows(got) == _arrow_rows(written.read().cast(got.schema)), partition
        mine, spark_s = (store.properties(t, partition) or {} for t in (driver, twin))
        assert mine.pop("write_id") != spark_s.pop("write_id")
        assert mine == spark_s, partition
    everything = [_spark_rows(store.read(spark, t, None)) for t in (driver, twin)]
    assert everything[0] == everything[1]
    columns = [*table.columns, "__$operation"]
    assert _outside_spark(store, driver, columns) == _outside_spark(store, twin, columns)


MIRRORS = {"delta-rs": ["mirror", "delta_rs"], "vectors": ["mirror", "vectors"]}
TWIN = ["mirror", "spark"]


@pytest.mark.parametrize("name", KEYED)
def test_mirrors_merged_in_the_driver_equal_spark_s(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    demo: dict[str, DemoTable],
    name: str,
) -> None:
    """Two ranges merged into a mirror by delta-rs (created by delta-rs) and into one with
    deletion vectors (created by Spark) in the driver, and by Spark's MERGE into a twin; then
    a third range by Spark's MERGE into all three."""
    table = demo[name]
    store = AssetStore(tmp_path)
    keys = table.table.primary_key
    base = sqlserver_source.drop_snapshot_columns_in_driver(table.snapshot_rows())
    rows = base.read().num_rows
    start = {"lsn": Lsn.from_int(9).hex}
    created = MIRRORS["delta-rs"]
    _in_driver(spark, lambda: mirror_store.rebuild_in_driver(spark, store, created, base, start))
    assert _engine(store, created).startswith("delta-rs")
    for key in (MIRRORS["vectors"], TWIN):  # Spark's, with deletion vectors on
        frame = _frame(spark, base)
        _by_spark(
            monkeypatch,
            lambda k=key, f=frame: mirror_store.rebuild(
                spark, store, k, f, start, rows, key_columns=keys
            ),
        )
    schema = _schema(store, TWIN)
    assert _schema(store, created) == schema

    def properties(index: int) -> dict[str, str]:
        return {"lsn": Lsn.from_int(10 + index).hex}

    for index in range(2):
        changes = table.changes(index)
        by_spark = spark_merges.spark_merge_keyed(
            spark,
            store,
            TWIN,
            _frame(spark, changes),
            key_columns=keys,
            snapshot_lsn=table.replay_from,
            properties=properties(index),
        )
        for engine, key in MIRRORS.items():
            published = _in_driver(
                spark,
                lambda k=key, c=changes, i=index: driver_merges.driver_merge_keyed(
                    store,
                    k,
                    c,
                    key_columns=keys,
                    snapshot_lsn=table.replay_from,
                    properties=properties(i),
                    mirror_rows=rows,
                    change_rows=c.read().num_rows,
                ),
            )
            assert published is not None and published.version == by_spark.version, engine
            assert _engine(store, key).startswith(engine.replace("vectors", "cdc_assets"))
            assert published.user_metadata == by_spark.user_metadata
            for metric in ("numTargetRowsInserted", "numTargetRowsDeleted"):
                assert published.metrics[metric] == by_spark.metrics[metric], (engine, metric)
            assert _schema(store, key) == schema, (engine, index)
        outside = _outside_spark(store, TWIN, table.columns)
        for key in MIRRORS.values():
            assert _outside_spark(store, key, table.columns) == outside, (key, index)
    # the change data feed of both ranges, as Spark reads it
    feed = _feed(spark, store, TWIN, 1, 2)
    for key in MIRRORS.values():
        assert _feed(spark, store, key, 1, 2) == feed, key

    # Spark's MERGE into the tables the driver merged
    for key in (*MIRRORS.values(), TWIN):
        spark_merges.spark_merge_keyed(
            spark,
            store,
            key,
            _frame(spark, table.changes(2)),
            key_columns=keys,
            snapshot_lsn=table.replay_from,
            properties=properties(2),
        )
    expected = _spark_rows(store.read(spark, TWIN, None))
    outside = _outside_spark(store, TWIN, table.columns)
    for key in MIRRORS.values():
        assert _spark_rows(store.read(spark, key, None)) == expected, key
        assert _outside_spark(store, key, table.columns) == outside, key


def _spaced_mirror_and_twin(
    spark: SparkSession,
    store: AssetStore,
    monkeypatch: pytest.MonkeyPatch,
    demo: dict[str, DemoTable],
    mirror: list[str],
) -> tuple[DemoTable, int]:
    """The keyed demo table with a space in its name and a ``time`` column: its mirror created by
    delta-rs at ``mirror`` (no Spark job), its twin by Spark at ``TWIN``; and its rows."""
    (name,) = [n for n in KEYED if " " in n]
    table = demo[name]
    base = sqlserver_source.drop_snapshot_columns_in_driver(table.snapshot_rows())
    start = {"lsn": Lsn.from_int(9).hex}
    _in_driver(spark, lambda: mirror_store.rebuild_in_driver(spark, store, mirror, base, start))
    rows = base.read().num_rows
    frame = _frame(spark, base)
    _by_spark(monkeypatch, partial(mirror_store.rebuild, spark, store, TWIN, frame, start, rows))
    return table, rows


def _merge_twin(spark: SparkSession, store: AssetStore, table: DemoTable, index: int) -> Any:
    """Range ``index`` merged into the twin by Spark; its changes and commit properties."""
    changes = table.changes(index)
    properties = {"lsn": Lsn.from_int(10 + index).hex}
    spark_merges.spark_merge_keyed(
        spark,
        store,
        TWIN,
        _frame(spark, changes),
        key_columns=table.table.primary_key,
        snapshot_lsn=table.replay_from,
        properties=properties,
    )
    return changes, properties


def test_a_mirror_grown_past_delta_rs_merges_gets_deletion_vectors_in_the_driver(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo: dict[str, DemoTable]
) -> None:
    """A keyed mirror delta-rs created small, once it holds more rows than delta-rs merges
    (``DRIVER_WRITE_ROWS``), gets deletion vectors in the driver (Spark's ALTER TABLE and MERGE
    cost 20-30 s of a range run under make demo) and its ranges merged with them: no Spark job,
    the rows Spark's MERGE gives a twin, read alike outside Spark; the table with a space in its
    name and a ``time`` column."""
    store = AssetStore(tmp_path)
    grown = ["mirror", "grown"]
    table, _rows = _spaced_mirror_and_twin(spark, store, monkeypatch, demo, grown)
    keys = table.table.primary_key
    for index in range(2):
        changes, properties = _merge_twin(spark, store, table, index)
        published = _in_driver(
            spark,
            lambda c=changes, p=properties: driver_merges.driver_merge_keyed(
                store,
                grown,
                c,
                key_columns=keys,
                snapshot_lsn=table.replay_from,
                properties=p,
                mirror_rows=DRIVER_WRITE_ROWS + 1,  # as the sync state says once it grew
                change_rows=c.read().num_rows,
            ),
        )
        assert published is not None, index
        assert _engine(store, grown).startswith("cdc_assets"), index
        configuration = store.delta_table(grown).metadata().configuration
        assert configuration["delta.enableDeletionVectors"] == "true"
        assert _spark_rows(store.read(spark, grown, None)) == _spark_rows(
            store.read(spark, TWIN, None)
        ), index
        outside = _outside_spark(store, TWIN, table.columns)
        assert _outside_spark(store, grown, table.columns) == outside, index


KEYLESS = [t.name for t in DEMO_TABLES if not t.has_key]


@pytest.mark.parametrize("name", KEYLESS)
def test_keyless_mirrors_merged_in_the_driver_equal_spark_s(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    demo: dict[str, DemoTable],
    name: str,
) -> None:
    """Two ranges merged through :func:`.mirror_store.apply` into a keyless mirror created by
    delta-rs (it gets deletion vectors at its first merge, committed in the driver, then takes
    ranges in the driver as a large mirror does), and by Spark's MERGE into a twin: the same
    rows, change feed and readings outside Spark, both ranges without a Spark job; then a third
    range by Spark's MERGE into both."""
    table = demo[name]
    store = AssetStore(tmp_path)
    base = sqlserver_source.drop_snapshot_columns_in_driver(table.snapshot_rows())
    rows = base.read().num_rows
    start = {"lsn": Lsn.from_int(9).hex}
    created = MIRRORS["delta-rs"]
    _in_driver(spark, lambda: mirror_store.rebuild_in_driver(spark, store, created, base, start))
    frame = _frame(spark, base)
    _by_spark(monkeypatch, partial(mirror_store.rebuild, spark, store, TWIN, frame, start, rows))
    for index in range(2):
        key = table.ranges[index][0]
        properties = {"lsn": Lsn.from_int(10 + index).hex}
        by_spark = spark_merges.spark_merge_multiset(
            spark,
            store,
            TWIN,
            _frame(spark, table.changes(index)),
            snapshot_lsn=table.replay_from,
            properties=properties,
        )
        change_log = ["cdc", "changes"]
        store.write_in_driver(
            spark, table.changes(index), change_log, key, lambda _rows: {"kind": "test"}
        )
        count = table.changes(index).read().num_rows
        changes = mirror_store.ChangeRanges(tuple(change_log), (key,), count, (), table.replay_from)
        apply = partial(
            mirror_store.apply,
            spark,
            store,
            changes,
            to=created,
            properties=properties,
            mirror_rows=rows,
        )
        # the first merge turns deletion vectors on (the commit of Spark's ALTER TABLE, made in
        # the driver): neither runs a Spark job
        published = _in_driver(spark, apply)
        assert _engine(store, created).startswith("cdc_assets"), index
        assert published.user_metadata == by_spark.user_metadata
        for metric in ("numTargetRowsInserted", "numTargetRowsDeleted"):
            assert published.metrics[metric] == by_spark.metrics[metric], (index, metric)
        twin_rows = store.read(spark, TWIN, None).count()
        assert published.properties[mirror_versions.ROWS] == twin_rows, index
        rows = published.properties[mirror_versions.ROWS]
        expected = _spark_rows(store.read(spark, TWIN, None))
        assert _spark_rows(store.read(spark, created, None)) == expected, index
        assert _schema(store, created) == _schema(store, TWIN), index
    outside = _outside_spark(store, TWIN, table.columns)
    assert _outside_spark(store, created, table.columns) == outside
    # the change data feed of each range's commit, as Spark reads it
    feeds = {}
    for target in (created, TWIN):
        newest = store.delta_table(target).version()
        feeds[tuple(target)] = _spark_rows(
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", newest - 1)
            .option("endingVersion", newest)
            .load(store.location(target))
            .drop("_commit_timestamp", "_commit_version")
        )
    assert feeds[tuple(created)] == feeds[tuple(TWIN)]

    # Spark's MERGE into the table the driver merged
    for target in (created, TWIN):
        spark_merges.spark_merge_multiset(
            spark,
            store,
            target,
            _frame(spark, table.changes(2)),
            snapshot_lsn=table.replay_from,
            properties={"lsn": Lsn.from_int(12).hex},
        )
    expected = _spark_rows(store.read(spark, TWIN, None))
    assert _spark_rows(store.read(spark, created, None)) == expected


HISTORIES = {"driver": ["history", "driver"], "spark": ["history", "spark"]}


@pytest.mark.parametrize("name", ["orders", "events"])  # time and datetimeoffset columns; keyless
def test_histories_applied_in_the_driver_equal_spark_s(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    demo: dict[str, DemoTable],
    name: str,
) -> None:
    """Two ranges applied through :func:`.history_driver.apply` to a history delta-rs created
    (its deletion vectors turned on in the driver at the first), without a Spark job, and by
    Spark's MERGE to a twin (the driver's threshold at 0): the same versions as Spark and DuckDB
    read them, and the same change data feed of each range."""
    table = demo[name]
    store = AssetStore(tmp_path)
    base = _frame(spark, sqlserver_source.drop_snapshot_columns_in_driver(table.snapshot_rows()))
    keys = tuple(table.table.primary_key)
    for key in HISTORIES.values():
        history_store.rebase(
            spark,
            store,
            key,
            base,
            at=Lsn.from_int(9),
            at_time=None,
            key_columns=keys,
            properties={"lsn": Lsn.from_int(9).hex},
        )
    change_log = ["cdc", "changes"]
    columns = [*table.columns, *history_store.VALIDITY_COLUMNS]
    for index in range(2):
        partition = table.ranges[index][0]
        store.write_in_driver(
            spark, table.changes(index), change_log, partition, lambda _rows: {"kind": "test"}
        )
        count = table.changes(index).read().num_rows
        properties = {"lsn": Lsn.from_int(10 + index).hex}
        apply = partial(
            history_driver.apply,
            spark,
            store,
            change_log=change_log,
            partitions=[partition],
            change_rows=count,
            key_columns=keys,
            after_lsn=table.replay_from,
            properties=properties,
        )
        published = _in_driver(spark, partial(apply, key_path=HISTORIES["driver"]))
        assert _engine(store, HISTORIES["driver"]).startswith("cdc_assets"), index
        with monkeypatch.context() as m:
            m.setattr(history_driver, "DRIVER_HISTORY_ROWS", 0)
            by_spark = apply(key_path=HISTORIES["spark"])
        assert published.user_metadata == by_spark.user_metadata
        assert published.metrics["numTargetRowsInserted"] > 0, index
        expected = _spark_rows(
            store.read(spark, HISTORIES["spark"], None).select(*_quoted(columns))
        )
        found = store.read(spark, HISTORIES["driver"], None).select(*_quoted(columns))
        assert _spark_rows(found) == expected, index
        assert _outside_spark(store, HISTORIES["driver"], columns) == _outside_spark(
            store, HISTORIES["spark"], columns
        ), index
        if keys:  # keyless: Spark's MERGE rewrites every current version of a touched row
            feeds = [
                _spark_rows(
                    spark.read.format("delta")
                    .option("readChangeFeed", "true")
                    .option("startingVersion", version)
                    .option("endingVersion", version)
                    .load(store.location(key))
                    .drop("_commit_timestamp", "_commit_version")
                )
                for key in HISTORIES.values()
                if (version := store.delta_table(key).version()) is not None
            ]
            assert feeds[0] == feeds[1], index


def _quoted(columns: list[str]) -> list[str]:
    return [f"`{c}`" for c in columns]


def test_a_driver_merge_that_lost_to_a_concurrent_commit_is_made_again_in_the_driver(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo: dict[str, DemoTable]
) -> None:
    """The maintenance job commits to a mirror (its retention setting) while a range merges into
    it: delta-rs's merge, made on the mirror as it read it, is refused ("Metadata changed since
    last commit"); the merge is made again in the driver on the mirror as it is now (no Spark
    job), with the rows Spark's MERGE gives a twin. A merge the driver declines with the mirror
    unchanged goes to Spark at once."""
    store = AssetStore(tmp_path)
    mirror = ["mirror", "raced"]
    table, rows = _spaced_mirror_and_twin(spark, store, monkeypatch, demo, mirror)
    keys = table.table.primary_key
    changes, properties = _merge_twin(spark, store, table, 0)

    def merge(change_rows: int = changes.read().num_rows) -> Any:
        return driver_merges.driver_merge_keyed(
            store,
            mirror,
            changes,
            key_columns=keys,
            snapshot_lsn=table.replay_from,
            properties=properties,
            mirror_rows=rows,
            change_rows=change_rows,
        )

    attempts: list[Any] = []
    uri = store.location(mirror)

    def raced() -> Any:
        if attempts:  # again: the mirror as it is now, in the driver
            attempts.append(_in_driver(spark, merge))
            return attempts[-1]
        read = store.delta_table(mirror)  # the merge reads the mirror, then maintenance commits
        assert table_maintenance.set_history_retention(spark, uri, 7 * 24 * 3600.0)
        with monkeypatch.context() as m:
            m.setattr(store, "delta_table", lambda _key: read)
            attempts.append(merge())
        return attempts[-1]

    published = driver_merges.again_after_concurrent_commits(uri, raced)
    assert attempts[0] is None  # delta-rs refused the merge on the mirror it had read
    assert published is not None and published == attempts[1]
    assert _engine(store, mirror).startswith("delta-rs")
    assert table_maintenance.keeps_history(
        table_maintenance.table_detail(spark, uri), 7 * 24 * 3600.0
    )  # the maintenance's commit kept
    assert _spark_rows(store.read(spark, mirror, None)) == _spark_rows(
        store.read(spark, TWIN, None)
    )
    declined: list[Any] = []  # a range too large for the driver
    too_many = driver_merges.DRIVER_MERGE_ROWS + 1
    assert (
        driver_merges.again_after_concurrent_commits(
            uri, lambda: declined.append(merge(change_rows=too_many)) or declined[-1]
        )
        is None
    )
    assert declined == [None]  # once: the mirror did not change
