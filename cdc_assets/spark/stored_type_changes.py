"""A change log whose columns are stored with other types from a new snapshot on.

A column rule given or changed after a table's first snapshot can change a column's stored type
(``hash`` of an ``int`` column stores 64 hex characters): the table is re-snapshotted under the
new rules (:mod:`cdc_assets.dagster.sync.column_rule_changes`), and its change log cannot hold
the new snapshot beside partitions of the old type (Delta refuses to merge the two types,
``DELTA_FAILED_TO_MERGE_FIELDS``). Before such a snapshot is written, the change log starts over:
its rows are dropped and its schema replaced in one commit, keeping its partitioning, so the
snapshot and the ranges after it are written under the new types. Nothing reads the ranges
before the new snapshot once it is published (the mirror is rebuilt from it; the history closes
and opens at its LSN the rows that differ), and their files go at the next VACUUM.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import types as T

from .asset_store import AssetStore
from .commit_metadata import without_user_metadata
from .concurrent_commits import retry_conflicts
from .stored_columns import STORED_NAME, stored_name, stored_schema


def retyped_columns(store: AssetStore, key_path: Sequence[str], schema: T.StructType) -> list[str]:
    """The columns of ``schema`` (a frame's, as the source names them) the table at
    ``key_path`` stores with another type; [] when there is no table."""
    table = store.delta_table(key_path)
    if table is None:
        return []
    held = {f["name"]: f["type"] for f in json.loads(table.schema().to_json())["fields"]}
    wanted = stored_schema(schema)
    return [
        f.metadata.get(STORED_NAME, f.name)
        for f in wanted.fields
        if f.name in held and held[f.name] != f.dataType.jsonValue()
    ]


def start_over_with_types(
    spark: SparkSession, store: AssetStore, key_path: Sequence[str], schema: T.StructType
) -> list[str]:
    """When the change log at ``key_path`` stores columns of ``schema`` with other types: its
    rows dropped and those columns retyped, in one commit (module doc). The columns retyped
    ([] when none: nothing done)."""
    changed = retyped_columns(store, key_path, schema)
    if not changed:
        return []
    uri = store.location(key_path)
    wanted = {f.name: f for f in stored_schema(schema).fields}
    retyped = {stored_name(name) for name in changed}
    current = spark.read.format("delta").load(uri).schema
    fields = [
        T.StructField(f.name, wanted[f.name].dataType, True, wanted[f.name].metadata)
        if f.name in retyped
        else f
        for f in current.fields
    ]
    empty = spark.createDataFrame([], T.StructType(fields))
    partitioning = list(store.delta_table(key_path).metadata().partition_columns)
    writer = empty.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
    if partitioning:
        writer = writer.partitionBy(*partitioning)
    with without_user_metadata(spark):
        retry_conflicts(lambda: writer.save(uri), f"retyping {', '.join(changed)} in {uri}")
    return changed
