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

The layer below the store, one concept per module: :mod:`.delta_location` (URIs as Spark and
delta-rs name them), :mod:`.partition_rows` (the partition-properties protocol and partition
rows as Arrow), :mod:`.commit_metadata` (userMetadata, :class:`Published`), :mod:`.stored_columns`
(columns Delta cannot store as they are), :mod:`.spark_sql_names` (quoting).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit_metadata import (
    Published,
    last_commit_published,
    to_json,
    without_user_metadata,
)
from .concurrent_commits import retry_conflicts
from .delta_location import (
    delta_rs_storage_options,
    delta_rs_uri,
    hadoop_uri,
    is_local,
    local_path,
    storage_uri,
)
from .partition_rows import (
    GAP,
    IN_PROGRESS,
    PARTITION_COLUMN,
    PROPERTIES_COLUMN,
    STORED_COLUMNS,
    WRITE_ID,
    Properties,
    arrow_fields,
    arrow_properties_row,
    as_partition_rows,
    data_rows,
    has_timestamp_ntz,
    missing_fields,
    properties_in,
    stored_alike,
    stored_column_names,
    with_null_columns,
)
from .spark_sql_names import sql_string
from .stored_columns import (
    decode_from_delta,
    decode_rows,
    encode_for_delta,
    encode_rows,
    source_schema,
    stored_schema,
)

log = logging.getLogger(__name__)

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
        return {} if table is None else properties_in(table, partitions)

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
        elif partition is not None and arrow_fields(schema) is not None:
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
                stored = with_null_columns(stored, later)
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
        if not all(stored_alike(table, f) for f in (fields, later) if f is not None):
            return None
        properties = {**properties, WRITE_ID: uuid.uuid4().hex, STORED_COLUMNS: list(columns)}
        text = to_json(properties)
        data = arrow_properties_row(partition, text, schema)
        try:
            if rows is not None and rows.num_rows:
                data = pa.concat_tables([as_partition_rows(rows, schema, partition), data])
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
        return last_commit_published(table, uri, properties)

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
        fields = arrow_fields(schema)
        return fields is not None and arrow_fields(missing_fields(schema, later)) is not None

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
        fields = arrow_fields(schema)
        later_fields = arrow_fields(missing_fields(schema, later))
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
            marker = arrow_properties_row(partition, text, table.schema)
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
        return last_commit_published(created, uri, properties)

    def _turn_on_timestamp_ntz(
        self, spark: SparkSession, key_path: Sequence[str], schema: T.StructType
    ) -> None:
        """Before Spark writes ``schema`` into an existing table created by delta-rs without a
        timestamp_ntz column: Spark's writer refuses to add one to a table without the feature
        (``DELTA_FEATURES_REQUIRE_MANUAL_ENABLEMENT``), so it is turned on first."""
        if not has_timestamp_ntz(schema):
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
        return last_commit_published(table, self.location(key_path), properties)

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
        return last_commit_published(table, uri, properties)

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
        return data_rows(df, stored_column_names(found, partitions))

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
        return data_rows(df, stored_column_names(properties_in(table, partitions), partitions))

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
        columns = stored_column_names(properties_in(table, partitions), partitions)
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
                use_threads=False,  # see properties_in
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
