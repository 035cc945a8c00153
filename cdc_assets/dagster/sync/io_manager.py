"""The IO manager: Spark DataFrames as Delta Lake tables, one per asset
(:class:`~cdc_assets.spark.asset_store.AssetStore`), and the one writer of every asset's data.

An asset returns a DataFrame, or an :class:`AssetWrite`: a typed write of the stores in
``spark/`` (:class:`~cdc_assets.spark.store_writes.StoreWrite`: a frame with properties computed
from its rows, a change-log snapshot or range, a mirror's MERGE, a history's update) and how the
commit's properties read as materialization metadata. The sync steps write each table in that
table's own thread, where its failure stays its own: they call :func:`write_output` (what
:meth:`SparkDeltaIOManager.handle_output` calls too) and yield :class:`Written`, which the IO
manager records without writing again. Assets whose definition metadata sets
``cdc_assets/layout: current`` (the mirrors) are one unpartitioned table: every partition run
moves the same current state forward.

Loading gives the current version; a partitioned upstream gives the requested partitions (one
read for several); ``cdc_assets/delta_version`` in the input's metadata pins a Delta version;
``cdc_assets/read: changes`` gives a mirror's or a history's changes since the version the
asset consumed last (:mod:`.incremental_inputs`), recorded with the step's outputs.
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
from cdc_assets.spark.change_feed import TableChanges
from cdc_assets.spark.commit_metadata import Published
from cdc_assets.spark.compaction import compact_after_commit
from cdc_assets.spark.partition_rows import Properties
from cdc_assets.spark.sqlserver_source import unwrap_source_error
from cdc_assets.spark.store_writes import FrameWrite, StoreWrite

from .incremental_inputs import consumed_metadata, load_changes, reads_changes

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

MetadataOf = Callable[[Properties], Mapping[str, Any]]


@dataclass(frozen=True)
class AssetWrite:
    """What an asset hands the IO manager: ``write`` commits (its properties computed by the
    store, from the rows read or from the source), ``metadata`` turns the properties committed
    into Dagster metadata."""

    write: StoreWrite
    metadata: MetadataOf = field(default=lambda _: {})


@dataclass(frozen=True)
class Written:
    """An :class:`AssetWrite` already committed by :func:`write_output` in the step (in the
    table's thread): the IO manager records its metadata and writes nothing."""

    published: Published
    metadata: MetadataOf


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


def write_output(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    partition: str | None,
    write: StoreWrite,
) -> Published:
    """Commit ``write`` to the asset at ``key_path`` (``partition``: None for an unpartitioned
    asset) and return the commit, then compact the table's small files if they are due
    (:func:`~cdc_assets.spark.compaction.compact_after_commit`: the writer's own, so nothing
    races it; a failure there is a warning, the commit stands). A source read that failed inside
    Spark becomes one clear :class:`Failure` (``source_error`` in its metadata) instead of the
    executor's Java and Python traces; nothing was committed (the data and its properties are
    one Delta commit)."""
    try:
        published = write.write(spark, store, key_path, partition)
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
    if published.committed:
        compact_after_commit(spark, store, key_path)
    return published


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

    def handle_output(
        self, context: OutputContext, obj: DataFrame | AssetWrite | Written | None
    ) -> None:
        consumed = consumed_metadata(context)
        if obj is None:
            context.log.info(f"{context.asset_key.to_user_string()}: nothing new to store")
            if consumed:
                context.add_output_metadata(consumed)
            return
        if isinstance(obj, Written):
            published, metadata = obj.published, obj.metadata
        else:
            output = obj if isinstance(obj, AssetWrite) else AssetWrite(FrameWrite(obj))
            partition = self._partition(context, context.definition_metadata or {})
            published = write_output(
                self.pyspark.spark_session,
                self.store,
                context.asset_key.path,
                partition,
                output.write,
            )
            metadata = output.metadata
        schema = (context.definition_metadata or {}).get(COLUMN_SCHEMA)
        context.add_output_metadata(
            {
                **({COLUMN_SCHEMA: schema} if schema is not None else {}),
                **delta_metadata(published),
                **metadata(published.properties),
                **consumed,
            }
        )

    def load_input(self, context: InputContext) -> DataFrame | TableChanges:
        spark = self.pyspark.spark_session
        if reads_changes(context):
            return load_changes(context, spark, self.store)
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
