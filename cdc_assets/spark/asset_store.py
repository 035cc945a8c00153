"""Where asset data lives: one Delta Lake table per asset, at ``<base>/<key path>``.

``base`` is a local path or a Hadoop file-system URI (``file://``, ``s3a://``, ``abfss://`` ...);
credentials come from the environment. Delta's commits are atomic on every one of them, so
nothing here renames, locks or lists files: a write that dies leaves the previous version.

Partitioned assets (the change logs) keep every partition in the same table, its rows marked
by the partition-key column ``_cdc_partition`` (also the table's physical partitioning). Writing
a partition replaces exactly that partition's rows (``replaceWhere``) in one commit that also
holds the partition's *properties* — LSNs, coverage, counts — as one extra "properties row"
(``_cdc_properties`` set, every data column null). So the properties are in the same commit
and the same files as the rows, survive log cleanup, are read without scanning the data
(partition pruning) and exist for empty partitions too. The properties are computed by a
``finalize`` callback from the data *before* the commit, after the rows are read in full; a
callback that raises (a validity check that failed) commits nothing. A partition that cannot be
written (changes removed by cleanup) is a properties row alone that records the gap.

Unpartitioned assets (the mirrors, the examples) are written whole, or updated in place with
``MERGE INTO`` (:mod:`.mirror_store`); their properties are the commit's ``userMetadata``.

The Dagster sensor reads properties often and without Spark: those reads go through delta-rs
(the ``deltalake`` package), which reads the Delta log and the change logs' properties rows
(change logs have no deletion vectors) but not the mirrors' data; writes and data reads go
through Spark.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .concurrent_commits import retry_conflicts
from .stored_columns import (
    decode_from_delta,
    decode_rows,
    encode_for_delta,
    encode_rows,
    source_schema,
    stored_schema,
)

log = logging.getLogger(__name__)

PARTITION_COLUMN = "_cdc_partition"
PROPERTIES_COLUMN = "_cdc_properties"
WRITE_ID = "write_id"  # in every partition's properties: tells one write of it from another
# ... and the partition's own columns (as stored): the table's schema is the union of all
# partitions' columns (the snapshot's, the ranges', those before and after a schema change).
STORED_COLUMNS = "stored_columns"
GAP = "gap"  # a partition's properties when it could not be written: {"gap": {...}}
# A partition written in several commits (a snapshot's chunks, :mod:`.chunk_commits`) has a
# properties row per commit: the newest (highest COMMIT_SEQ) is the partition's; while it says
# IN_PROGRESS the partition is not published (its rows are a part of it).
COMMIT_SEQ = "commit_seq"
IN_PROGRESS = "in_progress"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
# Old layout (before Delta): <base>/<key path>/<partition or __all__>/_CURRENT
OLD_LAYOUT_POINTER = "_CURRENT"
OLD_LAYOUT_PARTITIONS = ("__all__", "snapshot")
# Columns Delta cannot store as they are (time, names with a space ...) are stored otherwise, by
# Spark's writes and the driver's alike: see .stored_columns.
# timestamp_ntz (datetime2) columns may first arrive with a later partition or schema: a table
# created without the feature refuses them ("requires manual enablement"), so every table has it.
TABLE_PROPERTIES: dict[str, str] = {"delta.feature.timestampNtz": "supported"}
# The reader features a table may have for its files to be read as plain Parquet files.
PLAIN_PARQUET_READER_FEATURES = frozenset({"timestampNtz"})
# A new table of at most this many rows on a local file system is created from the driver by
# delta-rs: its rows collected as Arrow and committed in milliseconds, where Spark's Delta writer
# costs about half a second of jobs and log replays (a thousand small tables' first sync). Such a
# table has the features its columns need, no more: Spark turns timestampNtz on when a later
# write brings such a column (:meth:`AssetStore.write`), and deletion vectors are turned on by a
# mirror's first Spark MERGE (:mod:`.mirror_store`), so delta-rs leaves those properties out.
DRIVER_WRITE_ROWS = 10_000
SET_BY_SPARK_LATER = ("delta.feature.timestampNtz", "delta.enableDeletionVectors")
# delta-rs's names of the commit metrics Spark's writes report (io_manager's OPERATION_METRICS)
DELTA_RS_METRICS = {
    "num_added_rows": "numOutputRows",
    "num_added_files": "numAddedFiles",
    "num_removed_files": "numRemovedFiles",
    "num_target_rows_inserted": "numTargetRowsInserted",
    "num_target_rows_updated": "numTargetRowsUpdated",
    "num_target_rows_deleted": "numTargetRowsDeleted",
    "num_target_files_added": "numTargetFilesAdded",
    "num_target_files_removed": "numTargetFilesRemoved",
}

Properties = dict[str, Any]
# computes a partition's properties from its rows: a Spark frame, or Arrow when read in the driver
Finalize = Callable[[DataFrame | pa.Table], Mapping[str, Any]]


@dataclass(frozen=True)
class RowsInDriver:
    """Rows a write takes from the driver, not from Spark (:meth:`AssetStore.write_in_driver`):
    ``read`` gives them as Arrow, with the columns of ``schema`` in its order."""

    schema: T.StructType
    read: Callable[[], pa.Table]


class NotPublished(LookupError):
    """Nothing has been published at this location yet."""


class OldLayout(RuntimeError):
    """The storage holds data of the Parquet layout that preceded Delta Lake."""


@dataclass(frozen=True)
class Published:
    """A committed write: the table, its Delta version, the properties and operation metrics."""

    uri: str
    version: int
    properties: Properties
    metrics: dict[str, int] = field(default_factory=dict)
    user_metadata: str | None = None  # as the commit holds it
    committed: bool = True  # False: nothing was committed, ``version`` is the current one


# ``commitInfo.userMetadata`` of a MERGE can only be set as a session conf. A classic session
# gives each such commit a session of its own (``newSession``: same SparkContext, own SQL conf),
# so threads of one driver can merge several tables at once; where that is not possible (Spark
# Connect) the commits of this process take turns.
_user_metadata_lock = threading.Lock()


@contextmanager
def user_metadata(spark: SparkSession, text: str) -> Iterator[SparkSession]:
    """A session whose commits carry ``text`` as their userMetadata. Temporary views of
    ``spark`` are not visible in it: share data through global temporary views."""
    try:
        own = spark.newSession()
    except Exception:  # Spark Connect has no newSession: one commit at a time
        own = None
    if own is not None:
        own.conf.set(USER_METADATA_CONF, text)
        yield own
        return
    with _user_metadata_lock:
        spark.conf.set(USER_METADATA_CONF, text)
        try:
            yield spark
        finally:
            spark.conf.unset(USER_METADATA_CONF)


@contextmanager
def without_user_metadata(spark: SparkSession) -> Iterator[SparkSession]:
    """``spark`` for a commit that must carry no userMetadata (a table property change): on
    Spark Connect, where :func:`user_metadata` sets it on the one shared session, this waits
    until no such commit runs."""
    with _user_metadata_lock:
        yield spark


def to_json(properties: Mapping[str, Any]) -> str:
    return json.dumps(dict(properties), sort_keys=True, default=str)


def storage_uri(base: str | Path) -> str:
    """``base`` as a URI string, a plain path made absolute."""
    text = str(base)
    if "://" in text:
        return text.rstrip("/")
    return str(Path(text).expanduser().absolute())


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def delta_rs_uri(uri: str) -> str:
    """delta-rs names S3 ``s3://`` (Hadoop's connector ``s3a://``)."""
    return "s3://" + uri.removeprefix("s3a://") if uri.startswith("s3a://") else uri


def hadoop_uri(uri: str) -> str:
    """A URI delta-rs gives (``s3://``) as Spark's Hadoop connector names it (``s3a://``)."""
    return "s3a://" + uri.removeprefix("s3://") if uri.startswith("s3://") else uri


def delta_rs_storage_options() -> dict[str, str]:
    """delta-rs reads AWS_* from the environment; plain-HTTP endpoints need this switch too."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return {"AWS_ALLOW_HTTP": "true"} if endpoint.startswith("http://") else {}


def _col(name: str) -> Any:
    return F.col("`" + name.replace("`", "``") + "`")


def sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_name(name: str) -> str:
    """``name`` as a quoted Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def _properties_in(table: Any, partitions: Sequence[str]) -> dict[str, Properties]:
    """The properties rows of ``partitions`` in the delta-rs ``table`` (those that have one)."""
    import pyarrow.compute as pc

    names = {f.name for f in table.schema().fields}
    if PARTITION_COLUMN not in names:
        return {}
    dataset = table.to_pyarrow_dataset(
        file_pruning_predicate=[(PARTITION_COLUMN, "in", list(partitions))]
    )
    rows = dataset.to_table(
        columns=[PARTITION_COLUMN, PROPERTIES_COLUMN],
        filter=pc.field(PROPERTIES_COLUMN).is_valid(),
        use_threads=False,  # see sync_state_store.read_rows: an abort at exit otherwise
    ).to_pylist()
    found: dict[str, Properties] = {}
    for r in rows:
        properties = json.loads(r[PROPERTIES_COLUMN])
        held = found.get(r[PARTITION_COLUMN])
        if held is None or properties.get(COMMIT_SEQ, -1) > held.get(COMMIT_SEQ, -1):
            found[r[PARTITION_COLUMN]] = properties
    return found


def _stored_columns(found: Mapping[str, Properties], partitions: Sequence[str]) -> list[str]:
    """The columns ``partitions`` were written with (their properties say), in order."""
    columns: list[str] = []
    for p in partitions:
        for name in (found.get(p) or {}).get(STORED_COLUMNS) or []:
            if name not in columns:
                columns.append(name)
    return columns


def _data_rows(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The data rows of a change log's read (properties rows dropped), with ``columns`` (those
    the table has; all but the partitioning ones when none is known), decoded."""
    df = df.where(F.col(PROPERTIES_COLUMN).isNull())
    kept = [c for c in columns if c in df.columns]
    if kept:
        df = df.select(*[_col(c) for c in kept])
    else:
        df = df.drop(PARTITION_COLUMN, PROPERTIES_COLUMN)
    return decode_from_delta(df)


# The column types delta-rs writes as the Delta type Spark's writer gives them (a variant, say,
# would become a struct): those of SQL Server's columns, as the source reads them.
ARROW_SAFE_TYPES = (
    T.BooleanType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.DecimalType,
    T.StringType,
    T.BinaryType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
)


def _arrow_fields(schema: T.StructType) -> list[Any] | None:
    """The Arrow fields of a table Spark's writer would create from ``schema``: every column
    nullable, the field metadata kept; None when a type is not among :data:`ARROW_SAFE_TYPES` or
    some metadata is not text (delta-rs keeps text only)."""
    from pyspark.sql.pandas.types import to_arrow_type

    if not all(isinstance(f.dataType, ARROW_SAFE_TYPES) for f in schema.fields):
        return None
    if not all(isinstance(v, str) for f in schema.fields for v in f.metadata.values()):
        return None
    return [
        pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"), True, f.metadata or None)
        for f in schema.fields
    ]


def _arrow_properties_row(partition: str, text: str, schema: pa.Schema) -> pa.Table:
    """A partition's properties row (every other column null) as delta-rs commits it."""
    return pa.Table.from_pylist([{PARTITION_COLUMN: partition, PROPERTIES_COLUMN: text}], schema)


def _as_partition_rows(rows: pa.Table, schema: pa.Schema, partition: str) -> pa.Table:
    """``rows`` as data rows of ``partition`` in a table of ``schema``: its columns cast to the
    table's types, the table's other columns null, the properties column too."""
    count = rows.num_rows
    arrays = [
        pa.array([partition] * count, f.type)
        if f.name == PARTITION_COLUMN
        else rows.column(f.name).cast(f.type)
        if f.name in rows.column_names
        else pa.nulls(count, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _has_timestamp_ntz(schema: T.StructType) -> bool:
    return any("timestamp_ntz" in f.dataType.simpleString() for f in schema.fields)


def _stored_alike(table: Any, fields: T.StructType) -> bool:
    """The delta-rs ``table`` has the columns of ``fields`` with their Delta types and field
    metadata (a ``time`` column stored as text, say, and not as plain text)."""
    found = T.StructType.fromJson(json.loads(table.schema().to_json()))
    have = {f.name: f for f in found.fields}
    return all(
        f.name in have
        and have[f.name].dataType == f.dataType
        and (have[f.name].metadata or {}) == (f.metadata or {})
        for f in fields.fields
    )


def _newest_commit(table: Any, uri: str, properties: Properties) -> Published:
    """The newest commit of ``table`` (delta-rs, its log just read) as a :class:`Published`;
    delta-rs's own commits get their metrics under the names Spark's have."""
    last = table.history(limit=1)[0]
    metrics = {
        DELTA_RS_METRICS.get(k, k): int(v)
        for k, v in (last.get("operationMetrics") or {}).items()
        if str(v).isdigit()
    }
    return Published(uri, int(last["version"]), properties, metrics, last.get("userMetadata"))


def _missing_fields(schema: T.StructType, wanted: T.StructType | None) -> T.StructType:
    """The fields of ``wanted`` that ``schema`` lacks."""
    names = set(schema.names)
    return T.StructType([f for f in (wanted.fields if wanted else []) if f.name not in names])


def _with_null_columns(df: DataFrame, schema: T.StructType) -> DataFrame:
    """``df`` with the fields of ``schema`` it lacks, as nulls of their types."""
    missing = _missing_fields(df.schema, schema).fields
    nulls = [
        F.lit(None).cast(f.dataType).alias(f.name, metadata=f.metadata or None) for f in missing
    ]
    return df.select("*", *nulls) if nulls else df


class AssetStore:
    """Delta tables under ``base``: ``<base>/<key path>``, one per asset."""

    def __init__(self, base: str | Path) -> None:
        self.base = storage_uri(base)

    # -- where -----------------------------------------------------------------------------

    def location(self, key_path: Sequence[str], partition: str | None = None) -> str:
        """The asset's Delta table (all its partitions share it)."""
        return "/".join([self.base, *key_path])

    def refuse_old_layout(self, key_path: Sequence[str]) -> None:
        """:class:`OldLayout` if the asset's directory holds the Parquet layout's versions."""
        uri = self.location(key_path)
        if not is_local(uri):
            return  # the Parquet layout only ever lived on local file systems
        directory = local_path(uri)
        if (directory / "_delta_log").exists():
            return
        for name in OLD_LAYOUT_PARTITIONS:
            if (directory / name / OLD_LAYOUT_POINTER).exists():
                raise OldLayout(
                    f"{directory} holds data of the old Parquet layout, which cdc_assets no "
                    "longer reads: move the storage directory away and materialize the "
                    "'snapshot' partition again"
                )

    # -- reading without Spark (delta-rs): the log and the properties rows ------------------

    def _delta_rs(self, key_path: Sequence[str]) -> Any | None:
        from deltalake import DeltaTable

        uri = delta_rs_uri(self.location(key_path))
        options = delta_rs_storage_options()
        self.refuse_old_layout(key_path)
        if not DeltaTable.is_deltatable(uri, storage_options=options):
            return None
        return DeltaTable(uri, storage_options=options)

    def delta_table(self, key_path: Sequence[str]) -> Any | None:
        """The asset's table as delta-rs opens it (its log read), None when there is none."""
        return self._delta_rs(key_path)

    def _partition_properties(self, key_path: Sequence[str], partition: str) -> Properties | None:
        return self._properties_of(key_path, [partition]).get(partition)

    def _properties_of(
        self, key_path: Sequence[str], partitions: Sequence[str]
    ) -> dict[str, Properties]:
        """The properties rows of ``partitions`` (those that have one), in one read."""
        table = self._delta_rs(key_path)
        return {} if table is None else _properties_in(table, partitions)

    def commit_properties(self, key_path: Sequence[str]) -> tuple[int, Properties] | None:
        """(version, userMetadata) of the newest commit that has one; None for no table."""
        table = self._delta_rs(key_path)
        if table is None:
            return None
        for entry in table.history(limit=50):
            text = entry.get("userMetadata")
            if text:
                return int(entry["version"]), json.loads(text)
        return table.version(), {}

    def properties(self, key_path: Sequence[str], partition: str | None) -> Properties | None:
        """The properties committed with the partition (None when it is not published), or
        for ``partition=None`` those of the table's newest commit."""
        if partition is None:
            found = self.commit_properties(key_path)
            return None if found is None else found[1]
        properties = self._partition_properties(key_path, partition)
        if properties is None or GAP in properties or properties.get(IN_PROGRESS):
            return None
        return properties

    def written_properties(self, key_path: Sequence[str], partition: str) -> Properties | None:
        """The newest properties row of ``partition`` as written: also a gap's, or a partition
        still being written in several commits (``IN_PROGRESS``); None when it has none."""
        return self._partition_properties(key_path, partition)

    def is_published(self, key_path: Sequence[str], partition: str | None) -> bool:
        return self.properties(key_path, partition) is not None

    def current_version(self, key_path: Sequence[str], partition: str | None) -> str | None:
        """What tells this write of the partition from another (its write id); for an
        unpartitioned asset the Delta version. None when nothing is published."""
        if partition is None:
            found = self.commit_properties(key_path)
            return None if found is None else str(found[0])
        properties = self.properties(key_path, partition)
        return None if properties is None else properties.get(WRITE_ID)

    def gap(self, key_path: Sequence[str], partition: str) -> Properties | None:
        properties = self._partition_properties(key_path, partition)
        return properties.get(GAP) if properties else None

    def partition_keys(self, key_path: Sequence[str]) -> list[str]:
        """The partitions that have files in the table's current version (from its log)."""
        table = self._delta_rs(key_path)
        if table is None or PARTITION_COLUMN not in table.metadata().partition_columns:
            return []
        return sorted({p[PARTITION_COLUMN] for p in table.partitions()})

    def history(self, key_path: Sequence[str], limit: int | None = None) -> list[dict[str, Any]]:
        """The table's commits, newest first (delta-rs); [] when there is no table."""
        table = self._delta_rs(key_path)
        return [] if table is None else list(table.history(limit=limit))

    # -- writing (Spark) --------------------------------------------------------------------

    def write(
        self,
        spark: SparkSession,
        df: DataFrame,
        key_path: Sequence[str],
        partition: str | None,
        finalize: Finalize | None = None,
        *,
        table_properties: Mapping[str, str] | None = None,
        empty: bool = False,
        read_once: bool = True,
        later_columns: DataFrame | None = None,
        rows: int | None = None,
        keep_layout: bool = False,
    ) -> Published:
        """Read ``df`` in full, compute its properties, then commit rows and properties at once:
        the partition's rows replaced (``partition``), or the whole table (``None``).

        ``empty``: ``df`` has no rows (a quiet range, a gap). Nothing is read, and where the
        table can take it the partition becomes its properties row alone, committed with
        delta-rs in milliseconds instead of a Spark write of about a second. ``read_once``:
        False when ``finalize`` reads nothing of ``df`` (no need to hold it for two reads).
        ``later_columns``: a frame with the columns the table's later partitions write (a
        snapshot's: those of its ranges); the table gets those it lacks, null in this
        partition's rows and not among its stored columns, so that a later empty partition is
        such a properties row alone (a table's first range after its snapshot, at a thousand
        tables a Spark write each otherwise). ``rows``: how many rows ``df`` has, when known.

        A new table of a few rows (``rows``, or counted in the held data) on a local file
        system is created by delta-rs from the driver (:data:`DRIVER_WRITE_ROWS`), in one file;
        ``keep_layout``: ``df``'s partitions are to be its files (a mirror clustered by key),
        so Spark writes it whatever its size."""
        self.refuse_old_layout(key_path)
        data = encode_for_delta(df)
        # Read once, before the properties are computed: a second read of the source could
        # differ (a fuzzy snapshot), and the properties must describe the committed rows.
        # read_once=False: ``finalize`` does not read the data (it knows the counts already)
        hold = finalize is not None and not empty and read_once
        held = data.localCheckpoint(eager=True) if hold else data
        try:
            properties: Properties = {}
            if finalize is not None:
                properties = dict(finalize(decode_from_delta(held)))
            return self._commit(
                spark,
                held,
                key_path,
                partition,
                properties,
                empty=empty,
                held=hold,
                later_columns=later_columns,
                rows=0 if empty else rows,
                table_properties=table_properties,
                keep_layout=keep_layout,
            )
        finally:
            if hold:
                held.unpersist()

    def write_in_driver(
        self,
        spark: SparkSession,
        rows: RowsInDriver,
        key_path: Sequence[str],
        partition: str | None,
        finalize: Finalize | None = None,
        *,
        later_columns: DataFrame | None = None,
        table_properties: Mapping[str, str] | None = None,
    ) -> Published:
        """:meth:`write` for rows read in the driver (a small table's snapshot, a small
        range): ``finalize`` is given them as Arrow, and where delta-rs may create the table or
        replace the partition (a local table, columns it writes as Spark would) no Spark job
        runs at all; otherwise Spark writes them from the driver's copy. Columns Delta cannot
        store as they are are stored as Spark's write stores them (:mod:`.stored_columns`)."""
        self.refuse_old_layout(key_path)
        collected = rows.read()
        properties = dict(finalize(collected)) if finalize is not None else {}
        schema = stored_schema(rows.schema)
        stored = encode_rows(rows.schema, collected)
        table_properties = {**TABLE_PROPERTIES, **(table_properties or {})}
        later = stored_schema(later_columns.schema) if later_columns is not None else None
        stamped = dict(properties)
        if partition is not None:
            stamped[WRITE_ID] = uuid.uuid4().hex
            stamped[STORED_COLUMNS] = schema.names
        if self._may_create_small(key_path, schema, later):
            small = self._create_from_arrow(
                key_path, schema, stored, partition, stamped, later, table_properties
            )
            if small is not None:
                return small
        elif partition is not None and _arrow_fields(schema) is not None:
            replaced = self._replace_partition_in_driver(
                key_path, schema.names, partition, properties, stored, later, schema
            )
            if replaced is not None:
                return replaced
        df = spark.createDataFrame(collected, rows.schema)
        return self.write(
            spark,
            df,
            key_path,
            partition,
            lambda _: properties,
            table_properties=table_properties,
            read_once=False,
            later_columns=later_columns,
            rows=collected.num_rows,
        )

    def _commit(
        self,
        spark: SparkSession,
        data: DataFrame,
        key_path: Sequence[str],
        partition: str | None,
        properties: Properties,
        *,
        empty: bool,
        held: bool,
        later_columns: DataFrame | None,
        rows: int | None,
        table_properties: Mapping[str, str] | None,
        keep_layout: bool,
    ) -> Published:
        """Commit ``data`` (encoded for Delta; ``held``: read already) with ``properties``
        (:meth:`write`)."""
        uri = self.location(key_path)
        if empty and partition is not None:
            published = self._replace_partition_in_driver(
                key_path, data.columns, partition, properties
            )
            if published is not None:
                return published
        if partition is not None:
            properties[WRITE_ID] = uuid.uuid4().hex
            properties[STORED_COLUMNS] = data.columns
        later = encode_for_delta(later_columns).schema if later_columns is not None else None
        small = (
            None
            if keep_layout
            else self._create_small(
                key_path,
                data,
                partition,
                properties,
                rows=rows,
                held=held,
                later=later,
                table_properties={**TABLE_PROPERTIES, **(table_properties or {})},
            )
        )
        if small is not None:
            return small
        self._turn_on_timestamp_ntz(spark, key_path, data.schema)
        if partition is None:
            writer = data.write.format("delta").mode("overwrite")
            writer = writer.option("overwriteSchema", "true")
        else:
            stored = data.withColumn(PARTITION_COLUMN, F.lit(partition)).withColumn(
                PROPERTIES_COLUMN, F.lit(None).cast("string")
            )
            if later is not None:
                stored = _with_null_columns(stored, later)
            marker = self._properties_row(spark, data, partition, properties)
            writer = (
                stored.unionByName(marker, allowMissingColumns=True)
                .write.format("delta")
                .mode("overwrite")
                .partitionBy(PARTITION_COLUMN)
                .option("replaceWhere", f"{PARTITION_COLUMN} = {sql_string(partition)}")
                .option("mergeSchema", "true")
            )
        for key, value in {**TABLE_PROPERTIES, **(table_properties or {})}.items():
            writer = writer.option(key, value)
        text = to_json(properties)
        writer = writer.option("userMetadata", text)
        retry_conflicts(lambda: writer.save(uri), f"writing {uri}")
        return self.published(spark, uri, properties)

    def _replace_partition_in_driver(
        self,
        key_path: Sequence[str],
        columns: Sequence[str],
        partition: str,
        properties: Properties,
        rows: pa.Table | None = None,
        later: T.StructType | None = None,
        fields: T.StructType | None = None,
    ) -> Published | None:
        """Replace ``partition`` by ``rows`` (Arrow, in ``columns``; none: its properties row
        alone) and its properties row, with delta-rs; None (Spark writes it) when the table is
        not on a local file system (delta-rs commits to object stores need a locking setup of
        their own), does not exist yet, or lacks one of ``columns`` or of ``later``'s or takes
        no nulls, or stores one of ``fields`` (the rows' columns as stored) or of ``later``'s
        with another type or field metadata (Spark's write evolves the schema)."""
        uri = self.location(key_path)
        if not is_local(uri):
            return None
        table = self._delta_rs(key_path)
        if table is None:
            return None
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import DeltaError

        schema = pa.schema(table.schema().to_arrow())
        if PARTITION_COLUMN not in table.metadata().partition_columns:
            return None
        wanted = {*columns, *(later.names if later is not None else ())}
        if not wanted <= set(schema.names) or not all(f.nullable for f in schema):
            return None
        if not all(_stored_alike(table, f) for f in (fields, later) if f is not None):
            return None
        properties = {**properties, WRITE_ID: uuid.uuid4().hex, STORED_COLUMNS: list(columns)}
        text = to_json(properties)
        data = _arrow_properties_row(partition, text, schema)
        try:
            if rows is not None and rows.num_rows:
                data = pa.concat_tables([_as_partition_rows(rows, schema, partition), data])
            write_deltalake(
                table,
                data,
                mode="overwrite",
                predicate=f"{PARTITION_COLUMN} = {sql_string(partition)}",
                partition_by=[PARTITION_COLUMN],
                commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
            )
        except (DeltaError, pa.ArrowException) as exc:  # a feature or type it lacks, a lost commit
            log.warning("delta-rs could not write %s (%s); Spark writes it", uri, exc)
            return None
        table.update_incremental()
        return _newest_commit(table, uri, properties)

    def _create_small(
        self,
        key_path: Sequence[str],
        data: DataFrame,
        partition: str | None,
        properties: Properties,
        *,
        rows: int | None,
        held: bool,
        later: T.StructType | None,
        table_properties: Mapping[str, str],
    ) -> Published | None:
        """Create the table from ``data`` (encoded for Delta) with delta-rs, when it is new, on
        a local file system, and holds at most :data:`DRIVER_WRITE_ROWS` rows: ``rows`` (about
        how many it has) says so, or (``held``: ``data`` is read already) a collect of one row
        more finds fewer. The table is what Spark's write would make (same schema,
        partitioning, properties row and userMetadata). None when Spark must write it."""
        if not self._may_create_small(key_path, data.schema, later):
            return None
        if rows is not None:
            if rows > DRIVER_WRITE_ROWS:
                return None
            collected = data.toArrow()
        elif held:
            collected = data.limit(DRIVER_WRITE_ROWS + 1).toArrow()
            if collected.num_rows > DRIVER_WRITE_ROWS:
                return None
        else:
            return None
        return self._create_from_arrow(
            key_path, data.schema, collected, partition, properties, later, table_properties
        )

    def _may_create_small(
        self, key_path: Sequence[str], schema: T.StructType, later: T.StructType | None
    ) -> bool:
        """delta-rs may create the table (:meth:`_create_from_arrow`): it is new, on a local
        file system, and its columns are of types delta-rs writes as Spark would."""
        if not is_local(self.location(key_path)) or self._delta_rs(key_path) is not None:
            return False
        fields = _arrow_fields(schema)
        return fields is not None and _arrow_fields(_missing_fields(schema, later)) is not None

    def _create_from_arrow(
        self,
        key_path: Sequence[str],
        schema: T.StructType,
        collected: Any,
        partition: str | None,
        properties: Properties,
        later: T.StructType | None,
        table_properties: Mapping[str, str],
    ) -> Published | None:
        """Create the table with delta-rs from ``collected`` (Arrow, ``schema``'s columns, encoded
        for Delta), as Spark's write would; None when delta-rs cannot (Spark writes it)."""
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import DeltaError

        uri = self.location(key_path)
        fields = _arrow_fields(schema)
        later_fields = _arrow_fields(_missing_fields(schema, later))
        assert fields is not None and later_fields is not None  # _may_create_small
        count = collected.num_rows
        arrays = [collected.column(i).cast(f.type) for i, f in enumerate(fields)]
        text = to_json(properties)
        if partition is not None:
            extra = [
                pa.field(PARTITION_COLUMN, pa.string()),
                pa.field(PROPERTIES_COLUMN, pa.string()),
                *later_fields,
            ]
            arrays += [pa.array([partition] * count, pa.string())]
            arrays += [pa.nulls(count, f.type) for f in extra[1:]]
            fields += extra
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        if partition is not None:
            marker = _arrow_properties_row(partition, text, table.schema)
            table = pa.concat_tables([table, marker])
        configuration = {k: v for k, v in table_properties.items() if k not in SET_BY_SPARK_LATER}
        try:
            write_deltalake(
                uri,
                table,
                mode="error",  # created by nobody else meanwhile
                partition_by=[PARTITION_COLUMN] if partition is not None else None,
                configuration=configuration or None,
                commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
            )
        except (DeltaError, pa.ArrowException) as exc:  # created meanwhile, a type it lacks ...
            log.warning("delta-rs could not create %s (%s); Spark writes it", uri, exc)
            return None
        created = self._delta_rs(key_path)
        assert created is not None
        return _newest_commit(created, uri, properties)

    def _turn_on_timestamp_ntz(
        self, spark: SparkSession, key_path: Sequence[str], schema: T.StructType
    ) -> None:
        """Before Spark writes ``schema`` into an existing table created by delta-rs without a
        timestamp_ntz column: Spark's writer refuses to add one to a table without the feature
        (``DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT``), so it is turned on first."""
        if not _has_timestamp_ntz(schema):
            return
        table = self._delta_rs(key_path)
        if table is None or "timestampNtz" in (table.protocol().writer_features or []):
            return
        with without_user_metadata(spark) as session:
            session.sql(
                f"ALTER TABLE delta.`{self.location(key_path)}` "
                "SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')"
            )

    def _properties_row(
        self, spark: SparkSession, like: DataFrame, partition: str, properties: Mapping[str, Any]
    ) -> DataFrame:
        schema = T.StructType(
            [
                *(T.StructField(f.name, f.dataType, True, f.metadata) for f in like.schema.fields),
                T.StructField(PARTITION_COLUMN, T.StringType()),
                T.StructField(PROPERTIES_COLUMN, T.StringType()),
            ]
        )
        values = [None] * len(like.schema.fields) + [partition, to_json(properties)]
        return spark.createDataFrame([tuple(values)], schema)

    def mark_gap(
        self, spark: SparkSession, key_path: Sequence[str], partition: str, gap: Mapping[str, Any]
    ) -> None:
        """Record that ``partition`` cannot be written because changes are gone: its rows are
        replaced by a properties row holding the gap (so it reads as not published)."""
        self.write(
            spark,
            spark.createDataFrame([], T.StructType([])),
            key_path,
            partition,
            lambda _: {GAP: dict(gap)},
            empty=True,
        )

    def clear_gap(self, spark: SparkSession, key_path: Sequence[str], partition: str) -> None:
        """Forget a recorded gap of ``partition`` (a no-op, and no commit, when there is none)."""
        if self.gap(key_path, partition) is None:
            return
        with without_user_metadata(spark) as session:  # not another commit's properties
            session.sql(
                f"DELETE FROM delta.`{self.location(key_path)}` "
                f"WHERE {PARTITION_COLUMN} = {sql_string(partition)}"
            )

    def newest_commit(self, key_path: Sequence[str], properties: Properties) -> Published:
        """The table's newest commit (read by delta-rs) as published with ``properties``."""
        table = self._delta_rs(key_path)
        if table is None:
            raise NotPublished(f"no data has been published at {self.location(key_path)}")
        return _newest_commit(table, self.location(key_path), properties)

    def unchanged(self, key_path: Sequence[str], properties: Properties) -> Published:
        """The table's current version described by ``properties``, with no commit (a mirror
        whose position moves on in the source's sync state only)."""
        table = self._delta_rs(key_path)
        version = table.version() if table is not None else -1
        return Published(self.location(key_path), version, dict(properties), committed=False)

    def published(self, spark: SparkSession, uri: str, properties: Properties) -> Published:
        """The table's newest commit (just made by the caller), read from its log by delta-rs:
        milliseconds, where Spark's ``DESCRIBE HISTORY`` is a job of a few hundred."""
        from deltalake import DeltaTable

        table = DeltaTable(delta_rs_uri(uri), storage_options=delta_rs_storage_options())
        return _newest_commit(table, uri, properties)

    # -- reading (Spark) --------------------------------------------------------------------

    def read(
        self,
        spark: SparkSession,
        key_path: Sequence[str],
        partition: str | None,
        *,
        version: int | None = None,
    ) -> DataFrame:
        """The partition's rows (all rows for ``None``) at the current or a given Delta version;
        :class:`NotPublished` if there is nothing."""
        self.refuse_old_layout(key_path)
        if partition is not None and version is None:
            found = self._read_files(spark, key_path, [partition])
            if found is not None:
                return found
        uri = self.location(key_path)
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        try:
            df = reader.load(uri)
        except Exception as exc:
            if "DELTA_MISSING_DELTA_TABLE" in str(exc) or "is not a Delta table" in str(exc):
                raise NotPublished(f"no data has been published at {uri}") from None
            if "PATH_NOT_FOUND" in str(exc) or "does not exist" in str(exc):
                raise NotPublished(f"no data has been published at {uri}") from None
            raise
        if PARTITION_COLUMN in df.columns:
            if partition is None:
                df = df.where(F.col(PROPERTIES_COLUMN).isNull())
                return decode_from_delta(df.drop(PARTITION_COLUMN, PROPERTIES_COLUMN))
            return self._partition_rows(df, key_path, [partition])
        return decode_from_delta(df)

    def _partition_rows(
        self, df: DataFrame, key_path: Sequence[str], partitions: Sequence[str]
    ) -> DataFrame:
        """The data rows of ``partitions`` with the columns they were written with."""
        found = self._properties_of(key_path, partitions)
        df = df.where(F.col(PARTITION_COLUMN).isin(list(partitions)))
        return _data_rows(df, _stored_columns(found, partitions))

    def _read_files(
        self, spark: SparkSession, key_path: Sequence[str], partitions: Sequence[str]
    ) -> DataFrame | None:
        """The data rows of ``partitions``, read by Spark as the Parquet files that the table's
        log (read by delta-rs) lists for them. Through Delta's reader the same read costs a log
        replay when the table changed or left Delta's cache, and jobs that filter the table's
        files by partition, about a second of a small table's read: measured, 30 change logs'
        snapshot partitions read and each written as a new table took 17 s through Delta, 6 s
        this way. None (read through Delta) when the table has a reader feature other than
        timestamp_ntz (one delta-rs reads, such as variant columns: a table with deletion vectors
        or column mapping is refused by delta-rs's properties read either way), or lives on a
        file system other than a local one or S3."""
        uri = self.location(key_path)
        if not (is_local(uri) or uri.startswith("s3a://")):
            return None
        found = self._plain_partitioned(key_path)
        if found is None:
            return None
        table, schema = found
        schema = T.StructType([f for f in schema.fields if f.name != PARTITION_COLUMN])
        files = table.file_uris(file_pruning_predicate=[(PARTITION_COLUMN, "in", list(partitions))])
        files = [hadoop_uri(f) for f in files]
        if files:
            df = spark.read.schema(schema).parquet(*files)
        else:
            df = spark.createDataFrame([], schema)
        return _data_rows(df, _stored_columns(_properties_in(table, partitions), partitions))

    def _plain_partitioned(self, key_path: Sequence[str]) -> tuple[Any, T.StructType] | None:
        """The table (delta-rs) and its schema, when it is partitioned by partition and its
        files read as plain Parquet (no reader feature but timestamp_ntz); None otherwise."""
        table = self._delta_rs(key_path)
        if table is None or PARTITION_COLUMN not in table.metadata().partition_columns:
            return None
        if set(table.protocol().reader_features or []) - PLAIN_PARQUET_READER_FEATURES:
            return None
        return table, T.StructType.fromJson(json.loads(table.schema().to_json()))

    def rows_in_driver(
        self, key_path: Sequence[str], partitions: Sequence[str]
    ) -> RowsInDriver | None:
        """The data rows of ``partitions`` to be read here by delta-rs (a few rows: no Spark
        job), with the columns they were written with, as :meth:`read` gives them (columns
        stored otherwise back as they were); None when Spark must read them (not a local
        table, a reader feature delta-rs refuses, a stored type the driver does not read
        back)."""
        import pyarrow.compute as pc

        if not is_local(self.location(key_path)):
            return None
        found = self._plain_partitioned(key_path)
        if found is None:
            return None
        table, schema = found
        columns = _stored_columns(_properties_in(table, partitions), partitions)
        if not columns or not set(columns) <= set(schema.names):
            return None
        stored = T.StructType([schema[c] for c in columns])
        data = source_schema(stored)
        if data is None:
            return None

        def read() -> pa.Table:
            dataset = table.to_pyarrow_dataset(
                file_pruning_predicate=[(PARTITION_COLUMN, "in", list(partitions))]
            )
            rows = dataset.to_table(
                columns=columns,
                filter=pc.field(PROPERTIES_COLUMN).is_null(),
                use_threads=False,  # see _properties_in
            )
            return decode_rows(stored, rows)

        return RowsInDriver(data, read)

    def read_partitions(
        self,
        spark: SparkSession,
        key_path: Sequence[str],
        partitions: Sequence[str],
        *,
        version: int | None = None,
    ) -> DataFrame:
        """The rows of several partitions in one read."""
        self.refuse_old_layout(key_path)
        if version is None:
            found = self._read_files(spark, key_path, partitions)
            if found is not None:
                return found
        reader = spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        df = reader.load(self.location(key_path))
        return self._partition_rows(df, key_path, partitions)
