"""A change-log partition written as a sequence of Delta commits (a big table's snapshot).

:meth:`.asset_store.AssetStore.write` replaces a partition in one commit. A snapshot of a huge
table instead commits a batch of its chunks at a time (:mod:`.snapshot_chunks`), so a kill
loses only the batch in flight. Each commit holds the batch's rows and one properties row that
says how far the partition is, in the same files and commit as the rows:

- the first commit replaces the partition (``replaceWhere``: the previous snapshot's rows and
  properties go), every later one appends;
- every properties row carries ``commit_seq`` (0, 1, ...): a reader takes the newest
  (:data:`~.partition_rows.COMMIT_SEQ`), and the partition counts as published only once that row
  no longer says :data:`~.partition_rows.IN_PROGRESS`;
- each commit names the write (``txnAppId``, the snapshot's write id) and its place in it
  (``txnVersion``, its ``commit_seq``): Delta skips a commit it has already made for them, so a
  batch retried after its commit went through (an answer lost on the way) is never appended
  twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from . import sqlserver_source
from .asset_store import AssetStore
from .commit_metadata import Published, to_json
from .concurrent_commits import retry_conflicts
from .partition_rows import (
    COMMIT_SEQ,
    PARTITION_COLUMN,
    STORED_COLUMNS,
    WRITE_ID,
    Properties,
)
from .spark_sql_names import sql_string
from .stored_columns import TABLE_PROPERTIES, decode_from_delta, encode_for_delta

__all__ = ["append_chunks"]


def append_chunks(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    partition: str,
    df: DataFrame,
    finalize: Callable[[DataFrame], Mapping[str, Any]],
    *,
    write_id: str,
    commit_seq: int,
    later_columns: DataFrame | None = None,
) -> Published:
    """Read ``df`` (one batch of the partition's rows) once, compute its properties with
    ``finalize`` from the rows read, then commit rows and properties together: replacing the
    partition when ``commit_seq`` is 0, appended to it otherwise (module doc). ``write_id``
    names the whole sequence; ``later_columns`` as for :meth:`.AssetStore.write`."""
    store.refuse_old_layout(key_path)
    data = encode_for_delta(df)
    # Not eager: the first job on it (``finalize``'s summary) reads the source and keeps the rows,
    # the write reads them from there (one job fewer than counting them first).
    held = data.localCheckpoint(eager=False)
    try:
        properties: Properties = dict(finalize(decode_from_delta(held)))
        properties.update(
            {WRITE_ID: write_id, COMMIT_SEQ: commit_seq, STORED_COLUMNS: held.columns}
        )
        # the chunks' marker rows gave the properties their bounds; they are not stored
        rows = sqlserver_source.snapshot_rows(held)
        return _commit(spark, store, key_path, partition, rows, properties, later_columns)
    finally:
        held.unpersist()


def _commit(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    partition: str,
    data: DataFrame,
    properties: Properties,
    later_columns: DataFrame | None,
) -> Published:
    uri = store.location(key_path)
    store._turn_on_timestamp_ntz(spark, key_path, data.schema)
    later = encode_for_delta(later_columns).schema if later_columns is not None else None
    writer = (
        store.partition_rows(spark, data, partition, properties, later)
        .write.format("delta")
        .option("mergeSchema", "true")
        .option("txnAppId", str(properties[WRITE_ID]))
        .option("txnVersion", str(properties[COMMIT_SEQ]))
        .option("userMetadata", to_json(properties))
    )
    if properties[COMMIT_SEQ] == 0:
        writer = writer.mode("overwrite").option(
            "replaceWhere", f"{PARTITION_COLUMN} = {sql_string(partition)}"
        )
    else:
        writer = writer.mode("append")
    for key, value in TABLE_PROPERTIES.items():
        writer = writer.option(key, value)
    what = f"writing {uri} ({partition}, commit {properties[COMMIT_SEQ]})"
    retry_conflicts(lambda: writer.save(uri), what)
    return store.published(spark, uri, properties)
