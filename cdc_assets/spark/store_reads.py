"""Reading an asset's table: Spark DataFrames of a version or of partitions, Arrow in the driver.

:class:`StoreReads` is part of :class:`.asset_store.AssetStore` (it uses the store's
``location`` and properties helpers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .commit_metadata import NotPublished
from .delta_location import (
    hadoop_uri,
    is_local,
)
from .driver_writes import RowsInDriver
from .partition_rows import (
    PARTITION_COLUMN,
    PROPERTIES_COLUMN,
    data_rows,
    in_partitions,
    of_partitions,
    properties_in,
    stored_column_names,
)
from .stored_columns import (
    decode_from_delta,
    decode_rows,
    source_schema,
)

# The reader features a table may have for its files to be read as plain Parquet files.
PLAIN_PARQUET_READER_FEATURES = frozenset({"timestampNtz"})


class StoreReads:
    """:class:`.asset_store.AssetStore`'s reads (mixed into it)."""

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
        log (read by delta-rs) says may hold them (by their statistics), the rows filtered.
        Through Delta's reader the same read costs a log replay when the table changed or left
        Delta's cache, and jobs that filter the table's files by partition, about a second of a
        small table's read: measured, 30 change logs' snapshot partitions read and each written
        as a new table took 17 s through Delta, 6 s this way. None (read through Delta) when the
        table has a reader feature other than timestamp_ntz (one delta-rs reads, such as variant
        columns: a table with deletion vectors or column mapping is refused by delta-rs's
        properties read either way), or lives on a file system other than a local one or S3."""
        uri = self.location(key_path)
        if not (is_local(uri) or uri.startswith("s3a://")):
            return None
        found = self._plain_change_log(key_path)
        if found is None:
            return None
        table, schema = found
        files = [
            hadoop_uri(f) for f in table.file_uris(file_pruning_predicate=of_partitions(partitions))
        ]
        partitioned = PARTITION_COLUMN in table.metadata().partition_columns
        if partitioned:  # the old layout: each file one partition's, the column in its folder
            schema = T.StructType([f for f in schema.fields if f.name != PARTITION_COLUMN])
        if not files:
            df = spark.createDataFrame([], schema)
        else:
            df = spark.read.schema(schema).parquet(*files)
        if not partitioned:  # a file's statistics say it may hold these partitions, and others
            df = df.where(F.col(PARTITION_COLUMN).isin(list(partitions)))
        return data_rows(df, stored_column_names(properties_in(table, partitions), partitions))

    def _plain_change_log(self, key_path: Sequence[str]) -> tuple[Any, T.StructType] | None:
        """The table (delta-rs) and its schema, when it is a change log (its rows marked by
        partition) whose files read as plain Parquet (no reader feature but timestamp_ntz);
        None otherwise."""
        table = self._delta_rs(key_path)
        if table is None or PARTITION_COLUMN not in {f.name for f in table.schema().fields}:
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
        found = self._plain_change_log(key_path)
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
            dataset = table.to_pyarrow_dataset(file_pruning_predicate=of_partitions(partitions))
            rows = dataset.to_table(
                columns=columns,
                filter=pc.field(PROPERTIES_COLUMN).is_null() & in_partitions(partitions),
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
