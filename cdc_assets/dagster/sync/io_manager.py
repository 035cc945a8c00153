"""The IO manager: Spark DataFrames as Delta Lake tables, one per asset
(:class:`~cdc_assets.spark.asset_store.AssetStore`).

An asset returns a DataFrame, or a :class:`StoredFrame` when it wants properties computed from
the data (row counts, LSN bounds, coverage), committed with it and turned into materialization
metadata; a StoredFrame may instead bring its own ``write`` (the mirrors' MERGE). Assets whose
definition metadata sets ``cdc_assets/layout: current`` (the mirrors) are one unpartitioned
table: every partition run moves the same current state forward.

Loading gives the current version; a partitioned upstream gives the requested partitions (one
read for several); ``cdc_assets/delta_version`` in the input's metadata pins a Delta version.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    ConfigurableIOManager,
    Failure,
    InputContext,
    MetadataValue,
    OutputContext,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.commit_metadata import Published
from cdc_assets.spark.driver_writes import RowsInDriver
from cdc_assets.spark.partition_rows import Finalize, Properties
from cdc_assets.spark.sqlserver_source import unwrap_source_error

LAYOUT = "cdc_assets/layout"
CURRENT_LAYOUT = "current"
COLUMN_SCHEMA = "dagster/column_schema"  # repeated on each materialization (schemas change)
DELTA_VERSION = "cdc_assets/delta_version"  # input metadata: load this Delta version
# Delta operation metrics shown on each materialization (those the operation reports)
OPERATION_METRICS = (
    "numOutputRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetDeletionVectorsAdded",
    "numTargetFilesAdded",
    "numTargetFilesRemoved",
    "numAddedFiles",
    "numRemovedFiles",
    "numOutputBytes",
    "numTargetBytesAdded",
)

Write = Callable[[SparkSession, AssetStore, Sequence[str]], Published]


@dataclass(frozen=True)
class StoredFrame:
    """A DataFrame to store, with a ``finalize`` that computes properties from its data (it may
    raise to refuse the commit) and ``metadata`` that turns them into Dagster metadata. With
    ``write``, that function commits instead of the store's plain write (``df`` unused)."""

    df: DataFrame | None
    finalize: Finalize | None = None
    metadata: Callable[[Properties], Mapping[str, Any]] = field(default=lambda _: {})
    write: Write | None = None
    empty: bool = False  # ``df`` has no rows: nothing to read (see AssetStore.write)
    later_columns: DataFrame | None = None  # the columns of the table's later partitions (idem)
    rows: int | None = None  # about how many rows ``df`` has, when known (idem)
    # the rows read in the driver instead (``df`` None): a small snapshot, a small range
    in_driver: RowsInDriver | None = None


def delta_metadata(published: Published) -> dict[str, Any]:
    """The commit's Delta version and operation metrics, as Dagster metadata."""
    return {
        "dagster/uri": MetadataValue.path(published.uri),
        "delta_version": published.version,
        **{
            f"delta/{name}": published.metrics[name]
            for name in OPERATION_METRICS
            if name in published.metrics
        },
    }


# Source errors that are the whole source's, not one table's: the run fails and is retried whole.
SOURCE_LEVEL_ERRORS = ("SourceUnreachable", "LoginFailed")


def commit(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    partition: str | None,
    stored: StoredFrame,
) -> Published:
    """Write ``stored`` (its own ``write``, else the store's) and return the commit. A source
    read that failed inside Spark becomes one clear :class:`Failure` (``source_error`` in its
    metadata) instead of the executor's Java and Python traces; nothing was committed (the data
    and its properties are one Delta commit)."""
    try:
        if stored.write is not None:
            return stored.write(spark, store, key_path)
        if stored.in_driver is not None:
            return store.write_in_driver(
                spark,
                stored.in_driver,
                key_path,
                partition,
                stored.finalize,
                later_columns=stored.later_columns,
            )
        assert stored.df is not None
        return store.write(
            spark,
            stored.df,
            key_path,
            partition,
            stored.finalize,
            empty=stored.empty,
            later_columns=stored.later_columns,
            rows=stored.rows,
        )
    except Exception as exc:
        source_error = unwrap_source_error(exc)
        if source_error is None:
            raise
        raise Failure(
            description=f"{'/'.join(key_path)}: reading the source failed "
            f"({source_error.kind}): {source_error.message}",
            metadata={"source_error": source_error.kind},
            allow_retries=True,
        ) from None


def committed(published: Published, stored: StoredFrame) -> StoredFrame:
    """What an asset yields for a commit it made itself (:func:`commit` in its body, where one
    table's failure can be caught without failing the others): the IO manager only records it."""
    return StoredFrame(None, metadata=stored.metadata, write=lambda *_: published)


def is_source_level(exc: BaseException) -> bool:
    """The error concerns the whole source (unreachable, login refused), not one table."""
    if type(exc).__name__ in SOURCE_LEVEL_ERRORS:
        return True
    if isinstance(exc, Failure):
        kind = exc.metadata.get("source_error")
        return getattr(kind, "value", kind) in SOURCE_LEVEL_ERRORS
    return False


def describe_error(exc: BaseException) -> str:
    """One line for a table's failure: a Failure's description, else the error's first line."""
    text = exc.description if isinstance(exc, Failure) and exc.description else str(exc)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if isinstance(exc, Failure) or type(exc).__module__.startswith("cdc_assets."):
        return first  # our own messages say what happened and what to do
    return f"{type(exc).__name__}: {first}"


def table_error(name: str, exc: BaseException) -> str:
    """:func:`describe_error` prefixed with the table's name (once)."""
    text = describe_error(exc)
    return text if text.startswith(name) else f"{name}: {text}"


class SparkDeltaIOManager(ConfigurableIOManager):
    """Writes Spark DataFrames as Delta tables under ``base_path`` (a path or a Hadoop URI)."""

    base_path: str
    pyspark: LazyPySparkResource

    @property
    def store(self) -> AssetStore:
        return AssetStore(self.base_path)

    def _partition(
        self, context: OutputContext | InputContext, metadata: Mapping[str, Any]
    ) -> str | None:
        if metadata.get(LAYOUT) == CURRENT_LAYOUT or not context.has_asset_partitions:
            return None
        return context.asset_partition_key

    def handle_output(self, context: OutputContext, obj: DataFrame | StoredFrame | None) -> None:
        if obj is None:
            context.log.info(f"{context.asset_key.to_user_string()}: nothing new to store")
            return
        stored = obj if isinstance(obj, StoredFrame) else StoredFrame(obj)
        partition = self._partition(context, context.definition_metadata or {})
        published = commit(
            self.pyspark.spark_session, self.store, context.asset_key.path, partition, stored
        )
        schema = (context.definition_metadata or {}).get(COLUMN_SCHEMA)
        context.add_output_metadata(
            {
                **({COLUMN_SCHEMA: schema} if schema is not None else {}),
                **delta_metadata(published),
                **stored.metadata(published.properties),
            }
        )

    def load_input(self, context: InputContext) -> DataFrame:
        spark = self.pyspark.spark_session
        upstream = context.upstream_output
        metadata = (upstream.definition_metadata if upstream is not None else None) or {}
        version = (context.definition_metadata or {}).get(DELTA_VERSION)
        key_path = context.asset_key.path
        if metadata.get(LAYOUT) == CURRENT_LAYOUT or not context.has_asset_partitions:
            return self.store.read(spark, key_path, None, version=version)
        keys = list(context.asset_partition_keys)
        if len(keys) == 1:
            return self.store.read(spark, key_path, keys[0], version=version)
        return self.store.read_partitions(spark, key_path, keys, version=version)


SparkParquetIOManager = SparkDeltaIOManager  # the name before storage moved to Delta Lake
