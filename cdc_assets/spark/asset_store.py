"""Where asset data lives: one Delta Lake table per asset, at ``<base>/<key path>``.

``base`` is a local path or a Hadoop file-system URI (``file://``, ``s3a://``, ``abfss://`` ...);
credentials come from the environment. Delta's commits are atomic on every one of them, so
nothing here renames, locks or lists files: a write that dies leaves the previous version.

Partitioned assets (the change logs) keep every partition in the same table, its rows marked
by the partition-key column ``_cdc_partition`` (a column, not a folder per partition: see
:mod:`.partition_rows`). Writing a partition replaces exactly that partition's rows
(``replaceWhere``) in one commit that also holds the partition's *properties* — LSNs, coverage,
counts — as one extra "properties row" (``_cdc_properties`` set, every data column null). So the
properties are in the same commit and the same files as the rows, survive log cleanup, are read
without scanning the data (file statistics) and exist for empty partitions too. The
properties are computed by the writer's ``finalize`` (:mod:`.change_log_store`'s writes,
:class:`.store_writes.FrameWrite`) from the data *before* the commit, after the rows are read
in full; one that raises (a validity check that failed) commits nothing. A partition that
cannot be written (changes removed by cleanup) is a properties row alone that records the gap.

Unpartitioned assets (the mirrors, the examples) are written whole, or updated in place with
``MERGE INTO`` (:mod:`.mirror_store`); their properties are the commit's ``userMetadata``.

The Dagster sensor reads properties often and without Spark: those reads go through delta-rs
(the ``deltalake`` package), which reads the Delta log and the change logs' properties rows
(change logs have no deletion vectors) but not the mirrors' data; writes and data reads go
through Spark.

The store's driver writes are in :mod:`.driver_writes`, its reads in :mod:`.store_reads` (both part
of :class:`AssetStore`). The layer below the store, one concept per module: :mod:`.delta_location`
(URIs as Spark and delta-rs name them), :mod:`.partition_rows` (the partition-properties protocol
and partition rows as Arrow), :mod:`.commit_metadata` (userMetadata, :class:`Published`),
:mod:`.stored_columns` (columns Delta cannot store as they are), :mod:`.spark_sql_names` (quoting).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit_metadata import (
    NotPublished,
    Published,
    last_commit_published,
    to_json,
    without_user_metadata,
)
from .concurrent_commits import retry_conflicts
from .delta_location import (
    delta_rs_storage_options,
    delta_rs_uri,
    is_local,
    local_path,
    storage_uri,
)
from .driver_writes import DriverWrites
from .partition_rows import (
    GAP,
    IN_PROGRESS,
    PARTITION_COLUMN,
    PROPERTIES_COLUMN,
    STORED_COLUMNS,
    WRITE_ID,
    Finalize,
    Properties,
    has_timestamp_ntz,
    properties_in,
    with_null_columns,
)
from .spark_sql_names import column, sql_string
from .store_reads import StoreReads
from .stored_columns import (
    TABLE_PROPERTIES,
    decode_from_delta,
    encode_for_delta,
)

# Old layout (before Delta): <base>/<key path>/<partition or __all__>/_CURRENT
OLD_LAYOUT_POINTER = "_CURRENT"
OLD_LAYOUT_PARTITIONS = ("__all__", "snapshot")


class OldLayout(RuntimeError):
    """The storage holds data of the Parquet layout that preceded Delta Lake."""


class AssetStore(DriverWrites, StoreReads):
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
        """The partitions that have rows in the table's current version: each has a properties
        row (the old layout: the partition values its log lists)."""
        import pyarrow.compute as pc

        table = self._delta_rs(key_path)
        if table is None or PARTITION_COLUMN not in {f.name for f in table.schema().fields}:
            return []
        if PARTITION_COLUMN in table.metadata().partition_columns:
            return sorted({p[PARTITION_COLUMN] for p in table.partitions()})
        # a file without a properties row (its null count says) is not read
        with_properties = table.to_pyarrow_dataset(
            file_pruning_predicate=f"{PROPERTIES_COLUMN} IS NOT NULL"
        )
        rows = with_properties.to_table(
            columns=[PARTITION_COLUMN],
            filter=pc.field(PROPERTIES_COLUMN).is_valid(),
            use_threads=False,  # see sync_state_store.read_rows
        )
        return sorted(set(rows.column(PARTITION_COLUMN).to_pylist()))

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
            writer = (
                self.partition_rows(spark, data, partition, properties, later)
                .write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", f"{PARTITION_COLUMN} = {sql_string(partition)}")
                .option("mergeSchema", "true")
            )
        for key, value in {**TABLE_PROPERTIES, **(table_properties or {})}.items():
            writer = writer.option(key, value)
        text = to_json(properties)
        writer = writer.option("userMetadata", text)
        retry_conflicts(lambda: writer.save(uri), f"writing {uri}")
        return self.published(spark, uri, properties)

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

    def partition_rows(
        self,
        spark: SparkSession,
        data: DataFrame,
        partition: str,
        properties: Mapping[str, Any],
        later: T.StructType | None,
    ) -> DataFrame:
        """``data`` (encoded for Delta) as the rows of ``partition`` with its properties row,
        the partition columns first (:mod:`.partition_rows`), ``later``'s columns it lacks null."""
        stored = data.withColumn(PARTITION_COLUMN, F.lit(partition)).withColumn(
            PROPERTIES_COLUMN, F.lit(None).cast("string")
        )
        if later is not None:
            stored = with_null_columns(stored, later)
        marker = self._properties_row(spark, data, partition, properties)
        rows = stored.unionByName(marker, allowMissingColumns=True)
        first = [PARTITION_COLUMN, PROPERTIES_COLUMN]
        ordered = first + [c for c in rows.columns if c not in first]
        return rows.select(*[column(c) for c in ordered])

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
