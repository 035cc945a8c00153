"""Reading SQL Server CDC sources into Spark on the executors: the ``cdc_sqlserver`` data source.

A Python data source (``pyspark.sql.datasource``) whose ``read`` runs in the executors' Python
workers: each task opens its own connection (from the picklable settings), reads one piece — the
change rows of an LSN range, or one key range of a snapshot — through :mod:`cdc_assets.sqlserver`,
and yields Arrow record batches cast to the declared schema. Nothing funnels through the driver,
except a small table's snapshot and a range of a few changes (:func:`read_snapshot_in_driver`,
:func:`read_changes_in_driver`): read here by the same reader, where a Spark task and the jobs
that read its rows back cost more than its rows.

Snapshots of big tables are split into key ranges (:func:`~cdc_assets.sqlserver.chunks.
plan_key_ranges`), each read by its own task with its own snapshot. Every task ends its piece
with one *marker row*: all table columns NULL, ``__$replay_from`` and ``__$snapshot_lsn`` set to
its piece's bounds. Together the markers say where the snapshot stands in the LSN chain
(:func:`snapshot_bounds`): apply changes above the smallest ``replay_from`` by key, and the
table is consistent once the largest ``snapshot_lsn`` is passed. Empty pieces count too — an
empty key range read early must still get the inserts made into it later.

The settings travel in an option named ``secret.payload``: Spark redacts options whose names
match ``spark.redaction.regex`` (``secret``, ``password``, …) wherever it prints them.

https://spark.apache.org/docs/latest/api/python/tutorial/sql/python_data_source.html
"""

from __future__ import annotations

import base64
import pickle
import re
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import (
    CaptureInstance,
    Column,
    ConnectionSettings,
    SqlServerError,
    connection_factory,
    read_changes,
    snapshot_table,
)
from cdc_assets.sqlserver.arrow_types import arrow_schema
from cdc_assets.sqlserver.changes import change_schema
from cdc_assets.sqlserver.chunks import estimate_rows, plan_key_ranges
from cdc_assets.sqlserver.snapshot import (
    KeyRange,
    SnapshotMode,
    choose_mode,
    count_rows,
    snapshot_schema,
)

from .driver_writes import RowsInDriver

__all__ = [
    "DATA_SOURCE_NAME",
    "REPLAY_FROM",
    "SNAPSHOT_COLUMNS",
    "SNAPSHOT_LSN",
    "SourceReadError",
    "change_frame_schema",
    "drop_snapshot_columns",
    "drop_snapshot_columns_in_driver",
    "empty_change_frame",
    "load_snapshot",
    "load_snapshot_chunks",
    "plan_snapshot",
    "read_change_range",
    "read_changes_in_driver",
    "read_snapshot",
    "read_snapshot_in_driver",
    "resolve_snapshot_mode",
    "snapshot_bounds",
    "snapshot_frame_schema",
    "snapshot_rows",
    "snapshot_rows_in_driver",
    "snapshot_summary",
    "unwrap_source_error",
]

DATA_SOURCE_NAME = "cdc_sqlserver"
PAYLOAD_OPTION = "secret.payload"
REPLAY_FROM = "__$replay_from"
SNAPSHOT_LSN = "__$snapshot_lsn"
SNAPSHOT_COLUMNS = (REPLAY_FROM, SNAPSHOT_LSN)
DEFAULT_BATCH_ROWS = 10_000
Settings = ConnectionSettings

# An error raised in a task reaches the driver as text inside a PythonException; this marker
# lets :func:`unwrap_source_error` find the source's own message in it.
_ERROR_MARKER = "CDC_SOURCE_ERROR"
_ERROR_RE = re.compile(_ERROR_MARKER + r"\[(\w+)\]: (.*?)(?:\n|$)")


class SourceReadError(Exception):
    """A read on an executor failed with a source error (its class name and message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class ReadPlan:
    """What the data source reads: the change rows of a range, or a snapshot in key ranges."""

    settings: Settings
    instance: CaptureInstance
    arrow_schema: pa.Schema
    batch_rows: int
    lsn_range: LsnRange | None = None
    mode: SnapshotMode = "exact"
    key_ranges: tuple[KeyRange, ...] = ()
    rows: int | None = None  # a snapshot's: the table's rows (estimated) when it was planned

    def encode(self) -> str:
        return base64.b64encode(pickle.dumps(self)).decode("ascii")

    @staticmethod
    def decode(text: str) -> ReadPlan:
        plan = pickle.loads(base64.b64decode(text))
        if not isinstance(plan, ReadPlan):
            raise TypeError(f"{PAYLOAD_OPTION} does not hold a read plan")
        return plan


@dataclass(frozen=True)
class Piece(InputPartition):
    """One task's share: a key range of a snapshot (None for a change range)."""

    index: int
    key_range: KeyRange | None


def _spark_schema(schema: pa.Schema) -> StructType:
    nullable = pa.schema([f.with_nullable(True) for f in schema])
    return from_arrow_schema(nullable, prefer_timestamp_ntz=True)


def spark_type_names(columns: Sequence[Column]) -> dict[str, str]:
    """The Spark type each column is read as (``decimal(12,2)``, ``timestamp_ntz``, ...)."""
    schema = _spark_schema(arrow_schema(columns).schema)
    return {f.name: f.dataType.simpleString() for f in schema.fields}


def _cast(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    arrays = [batch.column(i).cast(f.type) for i, f in enumerate(schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class _Reader(DataSourceReader):
    def __init__(self, plan: ReadPlan, schema: StructType) -> None:
        self.plan = plan
        self.target = to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> Sequence[InputPartition]:
        if self.plan.lsn_range is not None:
            return [Piece(0, None)]
        return [Piece(i, r) for i, r in enumerate(self.plan.key_ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Piece)
        try:
            if self.plan.lsn_range is None:
                yield from self._snapshot(partition.key_range)
            else:
                yield from self._changes(self.plan.lsn_range)
        except SqlServerError as exc:
            message = " ".join(str(exc).split())
            raise RuntimeError(f"{_ERROR_MARKER}[{type(exc).__name__}]: {message}") from None

    def _changes(self, lsn_range: LsnRange) -> Iterator[pa.RecordBatch]:
        conn = connection_factory(self.plan.settings).connect(autocommit=True)
        try:
            for batch in read_changes(
                conn, self.plan.instance, lsn_range, batch_rows=self.plan.batch_rows
            ):
                yield _cast(batch, self.target)
        finally:
            conn.close()

    def _snapshot(self, key_range: KeyRange | None) -> Iterator[pa.RecordBatch]:
        factory = connection_factory(self.plan.settings)
        width = len(self.target) - len(SNAPSHOT_COLUMNS)
        data_schema = pa.schema(list(self.target)[:width])
        with snapshot_table(
            factory,
            self.plan.instance,
            mode=self.plan.mode,
            key_range=key_range,
            batch_rows=self.plan.batch_rows,
        ) as read:
            held: list[pa.RecordBatch] = []
            for batch in read:
                cast = _cast(batch, data_schema)
                extended = pa.RecordBatch.from_arrays(
                    [*cast.columns, *(pa.nulls(cast.num_rows, pa.binary()),) * 2],
                    schema=self.target,
                )
                if read.mode == "exact":
                    yield extended  # the snapshot LSN is known: stream
                else:
                    held.append(extended)  # fuzzy: bounds known at the end; at most a chunk
            yield from held
            result = read.result
        marker = [pa.nulls(1, f.type) for f in data_schema]
        marker += [pa.array([result.replay_from.raw]), pa.array([result.lsn.raw])]
        yield pa.RecordBatch.from_arrays(marker, schema=self.target)


class SqlServerDataSource(DataSource):
    """``spark.read.format("cdc_sqlserver").option("secret.payload", plan.encode()).load()``."""

    @classmethod
    def name(cls) -> str:
        return DATA_SOURCE_NAME

    def _plan(self) -> ReadPlan:
        return ReadPlan.decode(self.options[PAYLOAD_OPTION])

    def schema(self) -> StructType:
        return _spark_schema(self._plan().arrow_schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self._plan(), schema)


# Sessions the data source is registered with: registering again replaces it, and Spark logs a
# warning for that on every read.
_REGISTERED: weakref.WeakSet[SparkSession] = weakref.WeakSet()


_REGISTERING = threading.Lock()  # tables read side by side register it once


def _load(
    spark: SparkSession, plan: ReadPlan, source: type[SqlServerDataSource] | None = None
) -> DataFrame:
    """``plan``'s frame, read by the data source (``source``: a subclass of it, registered
    under a name of its own: the tests' and benchmarks' counting or killing readers)."""
    if source is None:
        source = SqlServerDataSource
        with _REGISTERING:
            if spark not in _REGISTERED:
                spark.dataSource.register(SqlServerDataSource)
                _REGISTERED.add(spark)
    else:
        spark.dataSource.register(source)
    return (
        spark.read.format(source.name())
        .schema(_spark_schema(plan.arrow_schema))
        .option(PAYLOAD_OPTION, plan.encode())
        .load()
    )


def read_change_range(
    spark: SparkSession,
    settings: Settings,
    instance: CaptureInstance,
    lsn_range: LsnRange,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> DataFrame:
    """The change rows of ``instance`` in ``lsn_range`` (lazy: read when an action runs).

    Columns: ``__$start_lsn``, ``__$command_id``, ``__$seqval``, ``__$operation``,
    ``__$update_mask``, the captured columns, ``__$commit_time``; the read fails if the range
    is not (or no longer) inside the validity interval.
    """
    plan = ReadPlan(
        settings, instance, change_schema(instance).schema, batch_rows, lsn_range=lsn_range
    )
    return _load(spark, plan)


def change_frame_schema(instance: CaptureInstance) -> StructType:
    """The Spark schema of :func:`read_change_range`'s frame."""
    return _spark_schema(change_schema(instance).schema)


def read_changes_in_driver(
    settings: Settings,
    instance: CaptureInstance,
    lsn_range: LsnRange,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> pa.Table:
    """The change rows :func:`read_change_range` gives, read here without a Spark job (a range
    of a few changes); a source error fails it as it fails a Spark read."""
    plan = ReadPlan(
        settings, instance, change_schema(instance).schema, batch_rows, lsn_range=lsn_range
    )
    reader = _Reader(plan, change_frame_schema(instance))
    batches = list(reader.read(Piece(0, None)))
    return pa.Table.from_batches(batches, schema=reader.target)


# Empty frames by session and schema: a thousand tables' snapshot and first range ask for one
# per table, each a ``createDataFrame`` of tens of milliseconds of driver time otherwise.
_EMPTY_FRAMES: weakref.WeakKeyDictionary[SparkSession, dict[str, DataFrame]] = (
    weakref.WeakKeyDictionary()
)
_EMPTY_FRAMES_LOCK = threading.Lock()


def empty_change_frame(spark: SparkSession, instance: CaptureInstance) -> DataFrame:
    """No change rows, with the columns :func:`read_change_range` gives."""
    schema = change_frame_schema(instance)
    key = schema.json()
    with _EMPTY_FRAMES_LOCK:
        found = _EMPTY_FRAMES.setdefault(spark, {}).get(key)
    if found is None:
        found = spark.createDataFrame([], schema)
        with _EMPTY_FRAMES_LOCK:
            _EMPTY_FRAMES[spark][key] = found
    return found


def resolve_snapshot_mode(
    settings: Settings, instance: CaptureInstance, mode: SnapshotMode | Literal["auto"]
) -> SnapshotMode:
    """``auto`` as the database allows (exact with snapshot isolation); no fuzzy without key."""
    conn = connection_factory(settings).connect(autocommit=True)
    try:
        return choose_mode(conn, instance, mode)
    finally:
        conn.close()


def plan_snapshot(
    settings: Settings,
    instance: CaptureInstance,
    *,
    mode: SnapshotMode | Literal["auto"] = "auto",
    chunk_rows: int = 250_000,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    after: tuple[Any, ...] | None = None,
    rows_after: int | None = None,
) -> ReadPlan:
    """What a snapshot of ``instance`` reads (one connection): the mode the database allows,
    the table's rows as the engine estimates them now (counted when it gives no estimate), and
    key ranges of about ``chunk_rows`` rows — above the key ``after`` only, for a snapshot that
    resumes there (``rows_after``: about how many rows are left)."""
    conn = connection_factory(settings).connect(autocommit=True)
    try:
        chosen = choose_mode(conn, instance, mode)
        rows = estimate_rows(conn, instance.source_schema, instance.source_table)
        if rows is None:
            rows = count_rows(conn, instance.source_schema, instance.source_table)
        left = rows if after is None else rows_after
        key_ranges = tuple(plan_key_ranges(conn, instance, chunk_rows, rows=left, after=after))
    finally:
        conn.close()
    fields = [
        *snapshot_schema(instance).schema,
        *(pa.field(c, pa.binary()) for c in SNAPSHOT_COLUMNS),
    ]
    return ReadPlan(
        settings,
        instance,
        pa.schema(fields),
        batch_rows,
        mode=chosen,
        key_ranges=key_ranges,
        rows=rows,
    )


def load_snapshot(spark: SparkSession, plan: ReadPlan) -> DataFrame:
    """The snapshot of ``plan`` as a Spark frame: one task per key range (lazy)."""
    return _load(spark, plan)


def load_snapshot_chunks(
    spark: SparkSession, plan: ReadPlan, key_ranges: Sequence[KeyRange]
) -> DataFrame:
    """The chunks ``key_ranges`` of ``plan``'s snapshot as a Spark frame, one task each (lazy):
    a snapshot written in several commits reads one batch of its chunks per commit."""
    return _load(spark, replace(plan, key_ranges=tuple(key_ranges)))


def read_snapshot(
    spark: SparkSession,
    settings: Settings,
    instance: CaptureInstance,
    *,
    mode: SnapshotMode | Literal["auto"] = "auto",
    chunk_rows: int = 250_000,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> DataFrame:
    """The table's rows read in key ranges of about ``chunk_rows`` rows, one task each, plus one
    marker row per range (module doc). Use :func:`snapshot_rows` for the rows alone and
    :func:`snapshot_bounds` for where the snapshot stands."""
    plan = plan_snapshot(
        settings, instance, mode=mode, chunk_rows=chunk_rows, batch_rows=batch_rows
    )
    return load_snapshot(spark, plan)


def snapshot_frame_schema(plan: ReadPlan) -> StructType:
    """The Spark schema of ``plan``'s rows (that of :func:`load_snapshot`'s frame)."""
    return _spark_schema(plan.arrow_schema)


def read_snapshot_in_driver(plan: ReadPlan) -> pa.Table:
    """The snapshot of ``plan`` read here, in this process, as one key range: the rows Spark's
    read would give (:func:`snapshot_frame_schema`) and one marker row, without a Spark job
    (a small table: its task and the jobs that read it back cost more than its rows). A source
    error fails it as it fails a Spark read (:func:`unwrap_source_error` finds it)."""
    reader = _Reader(plan, snapshot_frame_schema(plan))
    batches = list(reader.read(Piece(0, KeyRange())))
    return pa.Table.from_batches(batches, schema=reader.target)


def _is_marker() -> Any:
    return F.col(f"`{SNAPSHOT_LSN}`").isNotNull()


def snapshot_rows(df: DataFrame) -> DataFrame:
    """The table's rows of a snapshot frame (marker rows dropped, snapshot columns kept)."""
    return df.where(~_is_marker())


def drop_snapshot_columns(df: DataFrame) -> DataFrame:
    """The table's rows of a snapshot frame, with its columns only."""
    return snapshot_rows(df).drop(*SNAPSHOT_COLUMNS)


def snapshot_rows_in_driver(table: pa.Table) -> pa.Table:
    """:func:`snapshot_rows` of a snapshot read in the driver."""
    import pyarrow.compute as pc

    return table.filter(pc.field(SNAPSHOT_LSN).is_null())


def drop_snapshot_columns_in_driver(rows: RowsInDriver) -> RowsInDriver:
    """:func:`drop_snapshot_columns` of a snapshot read in the driver."""

    def read() -> pa.Table:
        return snapshot_rows_in_driver(rows.read()).drop_columns(list(SNAPSHOT_COLUMNS))

    schema = StructType([f for f in rows.schema.fields if f.name not in SNAPSHOT_COLUMNS])
    return RowsInDriver(schema, read)


def snapshot_bounds(df: DataFrame) -> tuple[Lsn, Lsn]:
    """(smallest ``replay_from``, largest ``snapshot_lsn``) over the marker rows of a snapshot."""
    replay_from, snapshot_lsn, _ = snapshot_summary(df)
    return replay_from, snapshot_lsn


def snapshot_summary(df: DataFrame | pa.Table) -> tuple[Lsn, Lsn, int]:
    """:func:`snapshot_bounds` and the number of the table's rows, in one Spark job (none for
    rows read into the driver, :func:`read_snapshot_in_driver`)."""
    if isinstance(df, pa.Table):
        return _arrow_summary(df)
    row = df.agg(
        F.min(F.when(_is_marker(), F.col(f"`{REPLAY_FROM}`"))),
        F.max(F.when(_is_marker(), F.col(f"`{SNAPSHOT_LSN}`"))),
        F.count(F.when(~_is_marker(), F.lit(1))),
    ).collect()[0]
    if row[0] is None or row[1] is None:
        raise ValueError("the frame holds no snapshot marker rows: it is not a complete snapshot")
    return Lsn.from_bytes(bytes(row[0])), Lsn.from_bytes(bytes(row[1])), int(row[2])


def _arrow_summary(table: pa.Table) -> tuple[Lsn, Lsn, int]:
    at = [Lsn.from_bytes(v) for v in table.column(SNAPSHOT_LSN).to_pylist() if v is not None]
    replay = table.column(REPLAY_FROM).to_pylist()
    if not at:
        raise ValueError("the frame holds no snapshot marker rows: it is not a complete snapshot")
    starts = [Lsn.from_bytes(v) for v in replay if v is not None]
    return min(starts), max(at), table.num_rows - len(at)


def unwrap_source_error(exc: BaseException) -> SourceReadError | None:
    """The source error inside a failed Spark job's exception, if that is what failed it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        match = _ERROR_RE.search(str(current))
        if match:
            return SourceReadError(match.group(1), match.group(2).strip())
        current = current.__cause__ or current.__context__
    return None
