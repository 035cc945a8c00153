"""The IO manager: Spark DataFrames as atomically published Parquet, one directory per asset and
partition (:class:`~cdc_assets.spark.asset_store.AssetStore`).

An asset returns a DataFrame, or a :class:`StoredFrame` when it wants properties computed from the
written data (row counts, LSN bounds, coverage) and turned into materialization metadata. Assets
whose definition metadata sets ``cdc_assets/layout: current`` (the mirrors) keep one location for
all partitions: every partition run moves the same current state forward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from dagster import (
    ConfigurableIOManager,
    Failure,
    InputContext,
    MetadataValue,
    OutputContext,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame

from cdc_assets.spark.asset_store import AssetStore, Finalize, Properties
from cdc_assets.spark.sqlserver_source import unwrap_source_error

LAYOUT = "cdc_assets/layout"
CURRENT_LAYOUT = "current"
COLUMN_SCHEMA = "dagster/column_schema"  # repeated on each materialization (schemas change)


@dataclass(frozen=True)
class StoredFrame:
    """A DataFrame to store, with a ``finalize`` that computes properties from the written data
    (it may raise to refuse publication) and ``metadata`` that turns them into Dagster metadata."""

    df: DataFrame
    finalize: Finalize | None = None
    metadata: Callable[[Properties], Mapping[str, Any]] = field(default=lambda _: {})


class SparkParquetIOManager(ConfigurableIOManager):
    """Writes Spark DataFrames as Parquet under ``base_path``, atomically per partition."""

    base_path: str
    pyspark: LazyPySparkResource

    @property
    def store(self) -> AssetStore:
        return AssetStore(Path(self.base_path))

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
        try:
            published = self.store.write(
                self.pyspark.spark_session,
                stored.df,
                context.asset_key.path,
                partition,
                stored.finalize,
            )
        except Exception as exc:
            source_error = unwrap_source_error(exc)
            if source_error is None:
                raise
            # One clear message instead of the executor's Java and Python traces; nothing of
            # this version was published (the store removes what it wrote).
            raise Failure(
                description=f"{context.asset_key.to_user_string()}: reading the source failed "
                f"({source_error.kind}): {source_error.message}",
                metadata={"source_error": source_error.kind},
                allow_retries=True,
            ) from None
        schema = (context.definition_metadata or {}).get(COLUMN_SCHEMA)
        context.add_output_metadata(
            {
                **({COLUMN_SCHEMA: schema} if schema is not None else {}),
                "dagster/uri": MetadataValue.path(str(published.version)),
                **stored.metadata(published.properties),
            }
        )

    def load_input(self, context: InputContext) -> DataFrame:
        spark = self.pyspark.spark_session
        upstream = context.upstream_output
        metadata = (upstream.definition_metadata if upstream is not None else None) or {}
        key_path = context.asset_key.path
        if metadata.get(LAYOUT) == CURRENT_LAYOUT or not context.has_asset_partitions:
            return self.store.read(spark, key_path, None)
        frames = [self.store.read(spark, key_path, k) for k in context.asset_partition_keys]
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
