"""The ``cdc_sqlserver`` Spark data source against the emulator: snapshots split into key ranges
read on the executors, their marker rows and bounds, change ranges, source errors surfacing on
the driver, and the settings travelling in an option Spark redacts."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import io
import itertools
import pickle
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import sqlserver_source as source
from cdc_assets.spark.sqlserver_source import (
    REPLAY_FROM,
    SNAPSHOT_COLUMNS,
    SNAPSHOT_LSN,
    SourceReadError,
    SqlServerDataSource,
    drop_snapshot_columns,
    read_change_range,
    read_snapshot,
    resolve_snapshot_mode,
    snapshot_bounds,
    snapshot_rows,
    unwrap_source_error,
)
from cdc_assets.sqlserver import (
    CaptureInstance,
    KeylessTableNeedsSnapshotIsolation,
    KeyRange,
    OdbcSettings,
    cdc_admin,
    connection_factory,
    discover,
    get_max_lsn,
    get_min_lsn,
    read_changes,
    snapshot_table,
)
from cdc_assets.sqlserver.chunks import plan_key_ranges
from cdc_assets.sqlserver.snapshot import read_rows
from cdc_assets.workload import DEMO_TABLES, TableDef, Workload, create_demo_database

ROWS = 300
CHUNK_ROWS = 70
SECRET = "Sup3r-Secret!"

# Extra tables next to the demo ones: a composite key led by a unicode string, and an empty table.
EXTRA_DDL = [
    "CREATE TABLE [dbo].[tags] ([label] nvarchar(20) NOT NULL, [n] int NOT NULL, "
    "[note] nvarchar(40) NULL, CONSTRAINT [pk_tags] PRIMARY KEY ([label], [n]))",
    "CREATE TABLE [dbo].[empty one] ([id] int NOT NULL, [v] decimal(38,9) NULL, "
    "CONSTRAINT [pk_empty_one] PRIMARY KEY ([id]))",
]
LABELS = ["alpha", "Bär", "café", "東京", "zulu", "ñandú", "Ωmega"]


def scan_all(path: Path) -> None:
    """Capture scans until the capture job has caught up."""
    while emulator.scan(str(path)):
        pass


@dataclass
class DemoSource:
    path: Path
    conn: Any
    workload: Workload

    @property
    def settings(self) -> EmulatorSettings:
        return EmulatorSettings(path=self.path)

    def instance(self, schema: str, table: str) -> CaptureInstance:
        instance = discover(self.conn)[(schema, table)].current_instance
        assert instance is not None
        return instance


def build_demo(path: Path, *, seed: int, rows: int, extra: bool = False) -> DemoSource:
    conn = emulator.connect(str(path), autocommit=True)
    workload = create_demo_database(conn, seed=seed, rows_per_table=rows, polling_interval=None)
    if extra:
        for statement in EXTRA_DDL:
            conn.execute(statement)
        cdc_admin.enable_table(conn, "dbo", "tags")
        cdc_admin.enable_table(conn, "dbo", "empty one", capture_instance="dbo_empty_one")
        values = [
            (label, n, f"{label}-{n}" if n % 3 else None)
            for label in LABELS
            for n in (1, 2, 10, 11)
        ]
        for row in values:
            conn.execute("INSERT INTO [dbo].[tags] ([label], [n], [note]) VALUES (?, ?, ?)", *row)
    scan_all(path)
    return DemoSource(path, conn, workload)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoSource]:
    """The five demo tables with ROWS rows each (plus ``tags`` and ``empty one``); read only."""
    db = build_demo(tmp_path_factory.mktemp("demo") / "source.db", seed=11, rows=ROWS, extra=True)
    yield db
    db.conn.close()


@pytest.fixture
def small(tmp_path: Path) -> Iterator[DemoSource]:
    """A small demo database for the tests that write to it."""
    db = build_demo(tmp_path / "small.db", seed=5, rows=15)
    yield db
    db.conn.close()


def normalized(value: Any) -> Any:
    """tz-aware datetimes as UTC (the instant is what must survive, not the offset)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def row_counter(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(normalized(v) for v in row.values()) for row in rows)


def reference_rows(settings: EmulatorSettings, instance: CaptureInstance) -> pa.Table:
    """The table read through the SQL Server layer alone (no Spark), exact mode."""
    with snapshot_table(connection_factory(settings), instance, mode="exact") as read:
        batches = list(read)
    return pa.Table.from_batches(batches, schema=read.schema.schema)


def spark_rows(df: DataFrame) -> list[dict[str, Any]]:
    table: pa.Table = df.toArrow()
    return table.to_pylist()


def read_once(df: DataFrame) -> tuple[DataFrame, list[dict[str, Any]]]:
    """Evaluate a snapshot frame once: a source read is not repeatable (every evaluation takes a
    new snapshot), so rows and bounds must come from the same evaluation, as the change log
    asset does with the written frame. Returns the checkpointed frame and its rows, each with
    ``pid``, the Spark partition (= key range) it was read by."""
    written = df.localCheckpoint(eager=True)
    return written, spark_rows(written.withColumn("pid", F.spark_partition_id()))


def lsn(value: Any) -> Lsn:
    return Lsn.from_bytes(bytes(value))


def check_markers(rows: list[dict[str, Any]], partitions: int) -> list[tuple[Lsn, Lsn]]:
    """One marker per partition, its last row, NULL in every table column; their bounds."""
    markers = [r for r in rows if r[SNAPSHOT_LSN] is not None]
    assert sorted(m["pid"] for m in markers) == list(range(partitions))
    for pid in range(partitions):
        assert [r[SNAPSHOT_LSN] is not None for r in rows if r["pid"] == pid][-1]
    for marker in markers:
        assert marker[REPLAY_FROM] is not None
        assert all(v is None for k, v in marker.items() if k not in (*SNAPSHOT_COLUMNS, "pid"))
    return [(lsn(m[REPLAY_FROM]), lsn(m[SNAPSHOT_LSN])) for m in markers]


def table_rows(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """The table's rows of :func:`read_once` rows: markers, snapshot columns and pid dropped."""
    return Counter(
        tuple(normalized(v) for k, v in r.items() if k not in (*SNAPSHOT_COLUMNS, "pid"))
        for r in rows
        if r[SNAPSHOT_LSN] is None
    )


# -- snapshots -----------------------------------------------------------------------------------


@pytest.mark.parametrize("table", DEMO_TABLES, ids=lambda t: t.name.replace(" ", "_"))
def test_snapshot_in_chunks_equals_the_table(
    spark: SparkSession, demo: DemoSource, table: TableDef
) -> None:
    instance = demo.instance(table.schema, table.name)
    before = get_max_lsn(demo.conn)
    df = read_snapshot(spark, demo.settings, instance, mode="exact", chunk_rows=CHUNK_ROWS)
    partitions = df.rdd.getNumPartitions()
    if table.has_key:
        assert partitions == -(-ROWS // CHUNK_ROWS)  # a bound every 70th key, no empty tail
    else:
        assert partitions == 1  # a keyless table cannot be cut by key

    # the columns: the captured ones in capture order, then the two snapshot columns
    assert df.columns == [*table.column_names, *SNAPSHOT_COLUMNS]
    assert drop_snapshot_columns(df).columns == list(table.column_names)
    assert snapshot_rows(df).columns == df.columns

    written, rows = read_once(df)
    pairs = check_markers(rows, partitions)
    assert all(replay == at for replay, at in pairs)  # exact: each chunk at its own S
    low, high = snapshot_bounds(written)
    assert (low, high) == (min(p[0] for p in pairs), max(p[1] for p in pairs))
    assert before <= low <= high  # every change committed before is inside the snapshot
    if partitions == 1:
        assert low == high

    got = table_rows(rows)
    assert sum(got.values()) == ROWS
    assert got == row_counter(spark_rows(drop_snapshot_columns(written)))
    assert got == row_counter(reference_rows(demo.settings, instance).to_pylist())
    # ... and the rows are what the workload put there (every type of the demo tables: decimal
    # up to (38,10), money, datetime2, datetimeoffset, time, binary, GUID, xml, unicode text)
    assert got == Counter(
        tuple(normalized(v) for v in r) for r in demo.workload.expected_rows(table)
    )
    if table.has_key:  # every key once: no row read by two chunks
        assert len(got) == ROWS


def test_snapshot_spark_types(spark: SparkSession, demo: DemoSource) -> None:
    instance = demo.instance("dbo", "events")
    df = read_snapshot(spark, demo.settings, instance, mode="exact")
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert types["amount"] == "decimal(38,6)"
    assert types["fee"] == "decimal(10,4)"
    assert types["occurred_at"] == "timestamp_ntz"
    assert types["occurred_local"] == "timestamp"
    assert types["duration"].startswith("time")
    assert types["attachment"] == "binary"
    assert types["trace_id"] == "string"
    assert types[REPLAY_FROM] == types[SNAPSHOT_LSN] == "binary"
    assert all(f.nullable for f in df.schema.fields)  # marker rows are NULL in every column
    lines = demo.instance("dbo", "order lines")
    lines_types = dict(read_snapshot(spark, demo.settings, lines).dtypes)
    assert lines_types["tax"] == "decimal(38,10)"
    assert lines_types["line no"] == "smallint"


def test_snapshot_bounds_single_chunk_exact(spark: SparkSession, demo: DemoSource) -> None:
    df = read_snapshot(spark, demo.settings, demo.instance("dbo", "customers"), mode="exact")
    assert df.rdd.getNumPartitions() == 1  # chunk_rows 250000 by default
    low, high = snapshot_bounds(df)
    assert low == high
    assert get_max_lsn(demo.conn) <= low


def test_snapshot_fuzzy(spark: SparkSession, demo: DemoSource) -> None:
    instance = demo.instance("dbo", "order lines")  # composite key, a space in the name
    before = get_max_lsn(demo.conn)
    df = read_snapshot(spark, demo.settings, instance, mode="fuzzy", chunk_rows=CHUNK_ROWS)
    partitions = df.rdd.getNumPartitions()
    assert partitions > 1
    written, rows = read_once(df)
    pairs = check_markers(rows, partitions)
    # Each chunk's watermarks come from the log (not the max LSN, which lags it): a low one
    # before its read, above every commit so far, and a high one after it.
    assert all(before < low < high for low, high in pairs)
    lows, highs = zip(*pairs, strict=True)
    assert snapshot_bounds(written) == (min(lows), max(highs))
    assert table_rows(rows) == row_counter(reference_rows(demo.settings, instance).to_pylist())


def test_fuzzy_keyless_is_refused(spark: SparkSession, demo: DemoSource) -> None:
    with pytest.raises(KeylessTableNeedsSnapshotIsolation):
        read_snapshot(spark, demo.settings, demo.instance("dbo", "events"), mode="fuzzy")


def test_resolve_snapshot_mode(demo: DemoSource) -> None:
    orders, events = demo.instance("dbo", "orders"), demo.instance("dbo", "events")
    assert resolve_snapshot_mode(demo.settings, orders, "auto") == "exact"  # snapshot isolation
    assert resolve_snapshot_mode(demo.settings, orders, "fuzzy") == "fuzzy"
    assert resolve_snapshot_mode(demo.settings, events, "exact") == "exact"
    with pytest.raises(KeylessTableNeedsSnapshotIsolation):
        resolve_snapshot_mode(demo.settings, events, "fuzzy")


def test_values_do_not_depend_on_the_session_time_zone(
    spark: SparkSession, demo: DemoSource
) -> None:
    """datetime2 (no zone) must not shift, datetimeoffset must stay the same instant."""
    table = next(t for t in DEMO_TABLES if t.name == "customers")
    instance = demo.instance(table.schema, table.name)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        df = drop_snapshot_columns(read_snapshot(spark, demo.settings, instance, chunk_rows=100))
        got = row_counter(spark_rows(df))
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    assert got == Counter(
        tuple(normalized(v) for v in r) for r in demo.workload.expected_rows(table)
    )


@pytest.mark.parametrize("mode", ["exact", "fuzzy"])
def test_empty_table_still_has_bounds(spark: SparkSession, demo: DemoSource, mode: str) -> None:
    instance = demo.instance("dbo", "empty one")
    df = read_snapshot(spark, demo.settings, instance, mode=mode, chunk_rows=1)  # type: ignore[arg-type]
    assert df.rdd.getNumPartitions() == 1
    written, rows = read_once(df)
    assert len(rows) == 1  # the marker alone
    ((replay_from, at),) = check_markers(rows, 1)
    assert snapshot_bounds(written) == (replay_from, at)
    assert get_max_lsn(demo.conn) <= replay_from <= at
    if mode == "exact":
        assert replay_from == at


def test_snapshot_bounds_needs_markers(spark: SparkSession, demo: DemoSource) -> None:
    df = read_snapshot(spark, demo.settings, demo.instance("dbo", "customers"), chunk_rows=100)
    with pytest.raises(ValueError, match="no snapshot marker rows"):
        snapshot_bounds(snapshot_rows(df))


def test_snapshot_bounds_compare_lsns_unsigned(spark: SparkSession) -> None:
    """LSN bytes >= 0x80 must sort above smaller ones (binary min/max as unsigned bytes)."""
    low, mid, high = (Lsn.from_int(n) for n in (0x7F, 0x80, 0xFF01))
    df = spark.sql(
        f"SELECT * FROM VALUES (1, CAST(NULL AS BINARY), CAST(NULL AS BINARY)), "
        f"(NULL, X'{mid.raw.hex()}', X'{high.raw.hex()}'), "
        f"(NULL, X'{low.raw.hex()}', X'{mid.raw.hex()}') "
        f"AS t(id, `{REPLAY_FROM}`, `{SNAPSHOT_LSN}`)"
    )
    assert snapshot_bounds(df) == (low, high)


@pytest.mark.parametrize(
    "name",
    [*(f"{t.schema}.{t.name}" for t in DEMO_TABLES), "dbo.tags", "dbo.empty one"],
    ids=lambda n: n.replace(" ", "_"),
)
def test_snapshot_read_in_the_driver_equals_the_spark_read(
    spark: SparkSession, demo: DemoSource, name: str
) -> None:
    """A small table's snapshot read here, without Spark, gives the rows, marker and summary
    the data source's task gives, in the types Spark reads them as."""
    schema, table = name.split(".", 1)
    instance = demo.instance(schema, table)
    before = get_max_lsn(demo.conn)
    plan = source.plan_snapshot(demo.settings, instance, mode="exact")
    expected = reference_rows(demo.settings, instance)
    assert plan.rows == expected.num_rows
    assert len(plan.key_ranges) == 1
    in_driver = source.read_snapshot_in_driver(plan)
    written, rows = read_once(source.load_snapshot(spark, plan))
    frame_schema = source.snapshot_frame_schema(plan)
    assert written.schema == frame_schema
    assert in_driver.schema.names == frame_schema.names
    assert spark.createDataFrame(in_driver, frame_schema).schema == frame_schema
    assert table_rows(in_driver.to_pylist()) == table_rows(rows)
    assert table_rows(in_driver.to_pylist()) == row_counter(expected.to_pylist())
    for summary in (source.snapshot_summary(in_driver), source.snapshot_summary(written)):
        replay_from, at, counted = summary
        assert before <= replay_from == at  # exact: its own LSN, nothing to replay
        assert counted == expected.num_rows


def test_a_source_error_in_a_driver_read_reads_as_in_a_spark_task(
    demo: DemoSource, tmp_path: Path
) -> None:
    plan = source.plan_snapshot(demo.settings, demo.instance("dbo", "customers"))
    gone = dataclasses.replace(plan, settings=EmulatorSettings(path=tmp_path / "gone.db"))
    with pytest.raises(Exception) as info:
        source.read_snapshot_in_driver(gone)
    error = unwrap_source_error(info.value)
    assert error is not None and error.kind == "SourceUnreachable"
    assert "gone.db" in error.message


def test_arrow_summary_compares_lsns_unsigned() -> None:
    low, mid, high = (Lsn.from_int(n) for n in (0x7F, 0x80, 0xFF01))
    table = pa.table(
        {
            "id": pa.array([1, None, None], pa.int32()),
            REPLAY_FROM: pa.array([None, mid.raw, low.raw], pa.binary()),
            SNAPSHOT_LSN: pa.array([None, high.raw, mid.raw], pa.binary()),
        }
    )
    assert source.snapshot_summary(table) == (low, high, 1)
    with pytest.raises(ValueError, match="no snapshot marker rows"):
        source.snapshot_summary(table.slice(0, 1))


# -- key ranges ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "chunk_rows"),
    [("orders", CHUNK_ROWS), ("order lines", 45), ("tags", 5), ("tags", 4), ("customers", ROWS)],
)
def test_key_ranges_tile_the_key_space(demo: DemoSource, table: str, chunk_rows: int) -> None:
    instance = demo.instance("dbo", table)
    ranges = plan_key_ranges(demo.conn, instance, chunk_rows)
    total = int(demo.conn.execute(f"SELECT COUNT(*) FROM [dbo].[{table}]").fetchone()[0])
    assert ranges[0].after is None
    assert ranges[-1].upto is None
    for previous, current in itertools.pairwise(ranges):
        assert current.after == previous.upto
        assert current.after is not None
    assert len(ranges) == max(1, -(-total // chunk_rows))  # no empty last range

    key_idx = [instance.column_names.index(k) for k in instance.key_columns]
    seen: Counter[tuple[Any, ...]] = Counter()
    for number, key_range in enumerate(ranges):
        batches = list(read_rows(demo.conn, instance, key_range=key_range, batch_rows=17))
        rows = pa.Table.from_batches(batches, schema=source.snapshot_schema(instance).schema)
        keys = [tuple(r[i] for i in key_idx) for r in (tuple(d.values()) for d in rows.to_pylist())]
        if number < len(ranges) - 1:
            assert len(keys) == chunk_rows  # bounds are every chunk_rows-th key
            assert keys[-1] == key_range.upto
        seen.update(keys)
    assert sum(seen.values()) == total
    assert max(seen.values()) == 1


def test_key_ranges_reject_bad_chunk_rows(demo: DemoSource) -> None:
    with pytest.raises(ValueError, match="chunk_rows"):
        plan_key_ranges(demo.conn, demo.instance("dbo", "orders"), 0)


def test_keyless_table_is_one_range(demo: DemoSource) -> None:
    assert plan_key_ranges(demo.conn, demo.instance("dbo", "events"), 10) == [KeyRange()]


def test_snapshot_of_string_composite_key_in_spark(spark: SparkSession, demo: DemoSource) -> None:
    instance = demo.instance("dbo", "tags")
    df = read_snapshot(spark, demo.settings, instance, mode="exact", chunk_rows=6)
    partitions = df.rdd.getNumPartitions()
    assert partitions == -(-len(LABELS) * 4 // 6)
    written, rows = read_once(df)
    check_markers(rows, partitions)
    got = table_rows(rows)
    kept = spark_rows(snapshot_rows(written))  # the table's rows, snapshot columns still there
    assert all(r[REPLAY_FROM] is None and r[SNAPSHOT_LSN] is None for r in kept)
    assert Counter(tuple(v for k, v in r.items() if k not in SNAPSHOT_COLUMNS) for r in kept) == got
    expected = {(label, n) for label in LABELS for n in (1, 2, 10, 11)}
    assert {(label, n) for label, n, _ in got} == expected
    assert sum(got.values()) == len(expected)


# -- change ranges -------------------------------------------------------------------------------


@pytest.fixture
def changed(small: DemoSource) -> tuple[DemoSource, LsnRange]:
    """``small`` after 40 workload transactions, all captured; the range holding them."""
    lo = get_max_lsn(small.conn)
    for _ in range(40):
        small.workload.step()
    scan_all(small.path)
    return small, LsnRange(lo, get_max_lsn(small.conn))


def test_change_range_equals_read_changes(
    spark: SparkSession, changed: tuple[DemoSource, LsnRange]
) -> None:
    db, lsn_range = changed
    total = 0
    for table in DEMO_TABLES:
        instance = db.instance(table.schema, table.name)
        df = read_change_range(spark, db.settings, instance, lsn_range, batch_rows=7)
        assert df.rdd.getNumPartitions() == 1
        expected = pa.Table.from_batches(
            list(read_changes(db.conn, instance, lsn_range)),
            schema=source.change_schema(instance).schema,
        )
        assert df.columns == expected.column_names
        assert df.columns[:5] == [
            "__$start_lsn",
            "__$command_id",
            "__$seqval",
            "__$operation",
            "__$update_mask",
        ]
        assert df.columns[-1] == "__$commit_time"
        got = [tuple(normalized(v) for v in r.values()) for r in spark_rows(df)]
        want = [tuple(normalized(v) for v in r.values()) for r in expected.to_pylist()]
        assert got == want  # same rows, same values, same (SQL Server's) order
        total += len(want)
    assert total > 40  # the range is not trivially empty


def test_range_above_max_lsn_fails_with_source_error(
    spark: SparkSession, changed: tuple[DemoSource, LsnRange]
) -> None:
    db, lsn_range = changed
    instance = db.instance("dbo", "orders")
    df = read_change_range(
        spark, db.settings, instance, LsnRange(lsn_range.hi, lsn_range.hi.increment())
    )
    with pytest.raises(Exception) as info:
        df.collect()
    error = unwrap_source_error(info.value)
    assert isinstance(error, SourceReadError)
    assert error.kind == "LsnNotAvailable"
    assert "validity interval" in error.message
    assert "capture job has not reached hi" in error.message
    assert str(lsn_range.hi) in error.message  # the maximum, as the interval's top
    assert "\n" not in error.message


def test_range_below_min_lsn_after_cleanup_fails(
    spark: SparkSession, changed: tuple[DemoSource, LsnRange]
) -> None:
    db, lsn_range = changed
    instance = db.instance("dbo", "orders")
    assert read_change_range(spark, db.settings, instance, lsn_range).count() > 0
    commits = [
        Lsn.from_bytes(bytes(r[0]))
        for r in db.conn.execute(
            "SELECT DISTINCT [__$start_lsn] FROM cdc.dbo_orders_CT WHERE [__$start_lsn] > ? "
            "ORDER BY [__$start_lsn]",
            lsn_range.lo.raw,
        ).fetchall()
    ]
    assert len(commits) >= 3
    mark = commits[len(commits) // 2]
    cdc_admin.cleanup_change_table(db.conn, "dbo_orders", mark, threshold=5000)
    assert get_min_lsn(db.conn, instance.name) == mark

    with pytest.raises(Exception) as info:
        read_change_range(spark, db.settings, instance, lsn_range).collect()
    error = unwrap_source_error(info.value)
    assert error is not None
    assert error.kind == "LsnNotAvailable"
    assert "validity interval" in error.message
    assert "removed by cleanup" in error.message
    assert str(mark) in error.message

    # what is left above the new minimum still reads, and only that
    rest = LsnRange(mark.decrement(), lsn_range.hi)
    df = read_change_range(spark, db.settings, instance, rest)
    lsns = {Lsn.from_bytes(bytes(r[0])) for r in df.select("`__$start_lsn`").collect()}
    assert lsns == set(commits[len(commits) // 2 :])


def test_unwrap_source_error_ignores_other_errors() -> None:
    assert unwrap_source_error(RuntimeError("something else")) is None
    inner = RuntimeError("CDC_SOURCE_ERROR[LockTimeout]: the table stayed locked\nmore")
    try:
        try:
            raise inner
        except RuntimeError as exc:
            raise ValueError("wrapped") from exc
    except ValueError as outer:
        found = unwrap_source_error(outer)
    assert found is not None
    assert (found.kind, found.message) == ("LockTimeout", "the table stayed locked")


# -- settings travel redacted --------------------------------------------------------------------


def test_settings_option_is_redacted(spark: SparkSession, demo: DemoSource) -> None:
    option = source.PAYLOAD_OPTION
    assert "secret" in option
    # Spark's own redaction (spark.redaction.regex) hides that option's value, not others
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pairs = jvm.java.util.ArrayList()
    pairs.add(jvm.scala.Tuple2(option, "AAAA"))
    pairs.add(jvm.scala.Tuple2("harmless", "BBBB"))
    seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(pairs).toSeq()
    redacted = jvm.org.apache.spark.util.Utils.redact(spark.sparkContext._jsc.sc().conf(), seq)
    text = redacted.toString()
    assert "AAAA" not in text and "redacted" in text and "BBBB" in text

    # a frame over a real SQL Server can be built (not read) without connecting
    odbc = OdbcSettings(server="x", database="d", user="u", password=SECRET)
    instance = demo.instance("dbo", "orders")
    lsn_range = LsnRange(Lsn.from_int(1), Lsn.from_int(2))
    for settings in (odbc, demo.settings):
        df = read_change_range(spark, settings, instance, lsn_range)
        payload = source.ReadPlan(
            settings,
            instance,
            source.change_schema(instance).schema,
            source.DEFAULT_BATCH_ROWS,
            lsn_range=lsn_range,
        ).encode()
        decoded = pickle.loads(base64.b64decode(payload))
        assert decoded.settings == settings
        # the data source takes its plan from that option and nowhere else
        data_source = SqlServerDataSource({option: payload})
        assert data_source.schema() == df.schema
        reader = data_source.reader(df.schema)
        assert [p.key_range for p in reader.partitions()] == [None]  # type: ignore[attr-defined]
        if settings is odbc:  # the payload does carry the password: it must not be shown
            assert SECRET.encode() in base64.b64decode(payload)
        plans = [df._jdf.queryExecution().toString()]
        for mode in ("simple", "extended", "cost", "formatted"):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                df.explain(mode=mode)
            plans.append(out.getvalue())
        for plan in plans:
            assert "cdc_sqlserver" in plan
            assert payload not in plan
            assert payload[:40] not in plan
            assert SECRET not in plan
    assert re.fullmatch(r"[a-z_]+", SqlServerDataSource.name())


def test_payload_must_hold_a_read_plan() -> None:
    bogus = base64.b64encode(pickle.dumps({"not": "a plan"})).decode("ascii")
    with pytest.raises(TypeError, match="does not hold a read plan"):
        source.ReadPlan.decode(bogus)
