"""Mirrors as Delta tables, updated in place with ``MERGE INTO``; :func:`apply` chooses how.

A mirror is one Delta table with deletion vectors (a MERGE marks the rows it removes instead of
rewriting their files, so bytes written grow with the changes, not the table; a mirror created
small, by delta-rs, gets them at its first Spark MERGE) and Change Data Feed (downstream assets can
read only what changed: ``readChangeFeed``). A small range is merged in the driver instead
(:func:`.driver_merges.driver_merge_keyed`): into a small mirror by delta-rs, without deletion
vectors (rewriting its few files costs less than Spark's jobs), into a large one with deletion
vectors written in the driver (:mod:`.merge_with_deletion_vectors`), whatever its columns (those
stored otherwise, :mod:`.stored_columns`, are written as Spark writes them). :func:`apply` is the
one place that chooses between a rebuild from a snapshot, a merge in the driver and Spark's MERGE,
with the thresholds (:data:`.driver_merges.DRIVER_MERGE_ROWS`, :data:`DRIVER_WRITE_ROWS`): the
mirror asset and the mirror benchmark call it. Each commit's ``userMetadata`` holds the mirror's
properties, among them the LSN it reached, so the data and its LSN are one commit; the table's
history maps each LSN the mirror reached to a Delta version, which
:func:`.mirror_versions.read_mirror_as_of` uses.

- keyed tables: the range's last change per key (:func:`.mirror_merge.last_change_per_key`) is
  merged: a delete removes the key, an insert or after image inserts or updates the row.
- keyless tables are multisets: per distinct row the changes add or remove copies. The affected
  distinct rows are deleted and re-inserted with their new number of copies, in one MERGE; a
  small range in the driver (:func:`.driver_merges.driver_merge_multiset`), with deletion vectors.

The merge is SQL (``MERGE INTO delta.`<uri>```) on a temporary view, which also works over
Spark Connect (Delta's Python ``DeltaTable`` API does not). ``userMetadata`` of a MERGE can only
be given as a session conf: each MERGE runs in a session of its own (``newSession``), its source
a global temporary view, so threads can merge different tables at once; over Spark Connect,
which has no ``newSession``, merges of one process take turns
(:func:`.commit_metadata.user_metadata`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from . import sqlserver_source
from .asset_store import AssetStore
from .commit_metadata import Published
from .driver_merges import (
    DRIVER_MERGE_ROWS,
    again_after_concurrent_commits,
    driver_merge_keyed,
    driver_merge_multiset,
)
from .driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from .key_clustering import clustered, is_large
from .mirror_merge import (
    rows_after_keyed_changes,
    rows_after_multiset_changes,
)
from .mirror_versions import (
    COLUMNS,
    ROWS,
)
from .session import write_parallelism
from .spark_merges import (
    MIRROR_TABLE_PROPERTIES,
    row_count,
    spark_merge_keyed,
    spark_merge_multiset,
)


@dataclass(frozen=True)
class ChangeRanges:
    """Range partitions of a table's change log that its mirror applies, oldest first."""

    change_log: tuple[str, ...]  # the change log's key path
    partitions: tuple[str, ...]
    rows: int  # the change rows they hold (0: quiet ranges, nothing to read)
    key_columns: tuple[str, ...]  # the table's key; none: the mirror is a multiset of rows
    after: bytes | None  # the LSN the changes apply from: those at or below it are ignored


@dataclass(frozen=True)
class SnapshotPartition:
    """The change log's snapshot partition that a mirror is rebuilt from."""

    partition: str
    rows: int | None  # the snapshot's rows, when known


@dataclass(frozen=True)
class MirrorWrite:
    """A mirror brought forward by ``changes`` and committed with ``properties`` (:func:`apply`:
    ``mirror_rows``, the mirror's rows before them when known; ``snapshot``, rebuilt from it)."""

    changes: ChangeRanges
    properties: Mapping[str, Any]
    mirror_rows: int | None = None
    snapshot: SnapshotPartition | None = None

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        return apply(
            spark,
            store,
            self.changes,
            to=key_path,
            properties=self.properties,
            mirror_rows=self.mirror_rows,
            snapshot=self.snapshot,
        )


def apply(
    spark: SparkSession,
    store: AssetStore,
    changes: ChangeRanges,
    *,
    to: Sequence[str],
    properties: Mapping[str, Any],
    mirror_rows: int | None = None,
    snapshot: SnapshotPartition | None = None,
) -> Published:
    """Bring the mirror at ``to`` forward by ``changes``, committed with ``properties`` and its
    rows after them (:data:`.mirror_versions.ROWS`). The one place that chooses how:

    - ``snapshot`` given (a new snapshot): the mirror is its rows with ``changes`` applied,
      written whole; from the driver when it is small (:data:`DRIVER_WRITE_ROWS`) and there is
      no change to apply, else by Spark (clustered by key when large);
    - no change rows (quiet ranges only): no commit, the mirror's current version with its
      ``mirror_rows`` (its rows, counted when not known);
    - at most :data:`.driver_merges.DRIVER_MERGE_ROWS` change rows that the driver reads: merged in
      the driver (:func:`.driver_merges.driver_merge_keyed`,
      :func:`.driver_merges.driver_merge_multiset`), no Spark job; made again there when it lost
      to a concurrent commit (:func:`.driver_merges.again_after_concurrent_commits`);
    - otherwise Spark's MERGE (:func:`.spark_merges.spark_merge_keyed`,
      :func:`.spark_merges.spark_merge_multiset`)."""
    if snapshot is not None:
        return _rebuild_from(spark, store, changes, snapshot, to, properties)
    if not changes.rows:
        rows = mirror_rows if mirror_rows is not None else row_count(spark, store.location(to))
        return store.unchanged(to, {**properties, ROWS: rows})
    keys, path = changes.key_columns, changes.change_log
    published = None
    small = changes.rows <= DRIVER_MERGE_ROWS
    found = store.rows_in_driver(path, changes.partitions) if small else None
    if found is not None:
        merge = (
            partial(
                driver_merge_keyed,
                store,
                to,
                found,
                key_columns=keys,
                snapshot_lsn=changes.after,
                properties=properties,
                mirror_rows=mirror_rows,
                change_rows=changes.rows,
            )
            if keys
            else partial(
                driver_merge_multiset,
                spark,
                store,
                to,
                found,
                snapshot_lsn=changes.after,
                properties=properties,
            )
        )
        published = again_after_concurrent_commits(store.location(to), merge)
    if published is None:
        frame = store.read_partitions(spark, path, changes.partitions)
        if keys:
            published = spark_merge_keyed(
                spark,
                store,
                to,
                frame,
                key_columns=keys,
                snapshot_lsn=changes.after,
                properties=properties,
                target_rows=mirror_rows,
            )
        else:
            published = spark_merge_multiset(
                spark, store, to, frame, snapshot_lsn=changes.after, properties=properties
            )
    # the row count: the one before plus what the MERGE's commit metrics say it inserted and
    # deleted; counted (a Spark job) only when either is not known
    rows = rows_after(mirror_rows, published.metrics)
    if rows is None:
        rows = row_count(spark, published.uri)
    return replace(published, properties={**published.properties, ROWS: rows})


def _rebuild_from(
    spark: SparkSession,
    store: AssetStore,
    changes: ChangeRanges,
    snapshot: SnapshotPartition,
    to: Sequence[str],
    properties: Mapping[str, Any],
) -> Published:
    """:func:`apply` from a snapshot: the mirror rebuilt, its columns the snapshot's (a
    re-snapshot after a schema change brings new columns in)."""
    path, keys = changes.change_log, changes.key_columns
    small = snapshot.rows is not None and snapshot.rows <= DRIVER_WRITE_ROWS
    if not changes.rows and small:
        # a small snapshot, no changes to apply: its rows are the mirror, no Spark job
        found = store.rows_in_driver(path, [snapshot.partition])
        if found is not None:
            rows = sqlserver_source.drop_snapshot_columns_in_driver(found)
            return rebuild_in_driver(spark, store, to, rows, properties)
    base = sqlserver_source.drop_snapshot_columns(store.read(spark, path, snapshot.partition))
    merged = base
    if changes.rows:
        frame = store.read_partitions(spark, path, changes.partitions)
        if keys:
            merged = rows_after_keyed_changes(
                base, frame, key_columns=keys, snapshot_lsn=changes.after
            )
        else:
            merged = rows_after_multiset_changes(base, frame, snapshot_lsn=changes.after)
    return rebuild(
        spark,
        store,
        to,
        merged,
        properties,
        # no changes: the mirror holds the snapshot's rows, as many as it counted
        snapshot.rows if not changes.rows else None,
        key_columns=keys,
        estimated_rows=snapshot.rows,
    )


def rows_after(before: int | None, metrics: Mapping[str, int]) -> int | None:
    """The mirror's rows after a MERGE: ``before`` and the commit's inserted and deleted rows
    (None when one of them is unknown: a MERGE that changed nothing commits no metrics)."""
    inserted = metrics.get("numTargetRowsInserted")
    deleted = metrics.get("numTargetRowsDeleted")
    if before is None or inserted is None or deleted is None:
        return None
    return before + inserted - deleted


def rebuild(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    df: DataFrame,
    properties: Mapping[str, Any],
    rows: int | None = None,
    *,
    key_columns: Sequence[str] = (),
    estimated_rows: int | None = None,
) -> Published:
    """Replace the mirror with ``df`` (from a snapshot), in one commit with ``properties``.
    ``rows``: how many rows ``df`` has, when known (the snapshot's own count, no changes
    applied): then nothing counts them and ``df`` is read once, by the write. A large keyed
    mirror (``rows`` or ``estimated_rows``) is written clustered by its ``key_columns``
    (:mod:`.key_clustering`), a small one in a few files."""
    size = rows if rows is not None else estimated_rows
    large = bool(key_columns) and is_large(size)
    if large:
        assert size is not None
        df = clustered(df, key_columns, size)
    else:
        df = df.coalesce(write_parallelism(spark))

    def finalize(written: DataFrame) -> dict[str, Any]:
        counted = written.count() if rows is None else rows
        return {**properties, COLUMNS: written.columns, ROWS: counted}

    return store.write(
        spark,
        df,
        key_path,
        None,
        finalize,
        table_properties=MIRROR_TABLE_PROPERTIES,
        read_once=rows is None,
        rows=rows,
        keep_layout=large,
    )


def rebuild_in_driver(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    rows: RowsInDriver,
    properties: Mapping[str, Any],
) -> Published:
    """:func:`rebuild` from rows read in the driver (a small snapshot without changes to
    apply): a new mirror is then created without a Spark job."""

    def finalize(written: DataFrame | pa.Table) -> dict[str, Any]:
        assert isinstance(written, pa.Table)
        return {**properties, COLUMNS: rows.schema.names, ROWS: written.num_rows}

    return store.write_in_driver(
        spark, rows, key_path, None, finalize, table_properties=MIRROR_TABLE_PROPERTIES
    )
