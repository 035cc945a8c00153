"""A small range merged into a mirror in the driver, without Spark jobs: by delta-rs into a small
mirror without deletion vectors, with deletion vectors written here into a large one
(:mod:`.merge_with_deletion_vectors`); None where Spark must merge (:mod:`.spark_merges`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from . import delta_log, merge_with_deletion_vectors
from .asset_store import AssetStore
from .commit_metadata import Published, to_json
from .deletion_vector_commits import deletion_vectors_turned_on
from .delta_location import is_local, local_path
from .driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from .mirror_merge import (
    DELETE,
    last_changes_as,
)
from .spark_merges import (
    ACTION,
    turn_on_mirror_properties,
)
from .store_reads import PLAIN_PARQUET_READER_FEATURES
from .stored_columns import encode_rows, stored_name

# A range of at most this many change rows into a keyed mirror is merged in the driver (held
# there as Arrow): by delta-rs into a small mirror, with deletion vectors written there into one
# that has them (:mod:`.merge_with_deletion_vectors`). A new snapshot of at most
# DRIVER_WRITE_ROWS rows, with no changes to apply, is written as the mirror from the driver.
DRIVER_MERGE_ROWS = 100_000
# A driver merge that lost to a concurrent commit is made again in the driver this many times in
# all before Spark merges.
DRIVER_ATTEMPTS = 3

log = logging.getLogger(__name__)


def again_after_concurrent_commits(
    uri: str, merge: Callable[[], Published | None]
) -> Published | None:
    """``merge()`` (a driver merge into the mirror at ``uri``), made again while it declined
    because another writer committed to the mirror meanwhile: the maintenance job's retention,
    compaction or VACUUM commit (seen under ``make demo`` at 20 tx/s: delta-rs's "Metadata
    changed since last commit", then Spark's MERGE with 40 Spark jobs). A merge that declined with
    the mirror unchanged declined for a reason of its own (too large, a log the driver does not
    write): Spark merges it. Every attempt reads the mirror anew; a keyed merge of final states,
    made twice, leaves the mirror as once."""
    table = local_path(uri) if is_local(uri) else None
    for attempt in range(1, DRIVER_ATTEMPTS + 1):
        before = delta_log.latest_version(table) if table is not None else None
        published = merge()
        if published is not None or table is None or attempt == DRIVER_ATTEMPTS:
            return published
        after = delta_log.latest_version(table)
        if after == before:
            return None
        log.info(
            "%s: version %s was committed beside the driver's merge (read at %s); merging again",
            uri,
            after,
            before,
        )
    return None


def delta_rs_name(name: str) -> str:
    """``name`` quoted for delta-rs's SQL expressions (case kept)."""
    return '"' + name.replace('"', '""') + '"'


def driver_merge_keyed(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
    mirror_rows: int | None,
    change_rows: int,
) -> Published | None:
    """:func:`.spark_merges.spark_merge_keyed` in the driver, for a range of ``change_rows`` rows:
    the same MERGE, committed with the same userMetadata and with Change Data Feed, in tens of
    milliseconds where Spark's MERGE costs seconds of jobs. A small mirror (``mirror_rows``, known,
    and ``change_rows`` at most :data:`.asset_store.DRIVER_WRITE_ROWS`) without deletion vectors
    is merged by delta-rs, which writes none and rewrites the few files a change touches; a
    larger one gets deletion vectors (turned on here, as Spark's ``ALTER TABLE`` would, once it
    grew) and its ranges up to ``DRIVER_MERGE_ROWS`` rows from
    :mod:`.merge_with_deletion_vectors`. None, and nothing committed, where Spark must merge: a
    mirror on another file system, a larger range, a log the driver does not write, or a commit
    that lost to a concurrent one. ``changes`` has the columns as the source has them; columns
    stored otherwise (:mod:`.stored_columns`) are merged in the form Spark's MERGE stores."""
    from deltalake import CommitProperties
    from deltalake.exceptions import DeltaError

    uri = store.location(key_path)
    table = store.delta_table(key_path) if is_local(uri) else None
    if table is None:
        return None
    vectors = table.metadata().configuration.get("delta.enableDeletionVectors") == "true"
    small = mirror_rows is not None and max(mirror_rows, change_rows) <= DRIVER_WRITE_ROWS
    if not vectors and not small and change_rows <= DRIVER_MERGE_ROWS:
        # grown past what delta-rs merges: deletion vectors from now on, turned on here (Spark's
        # ALTER TABLE and first MERGE cost 20-30 s of a range run under make demo)
        vectors = deletion_vectors_turned_on(local_path(uri))
    if vectors:
        if change_rows > DRIVER_MERGE_ROWS:
            return None
        return merge_with_deletion_vectors.deletion_vector_merge_keyed(
            store,
            key_path,
            changes,
            key_columns=key_columns,
            snapshot_lsn=snapshot_lsn,
            properties=properties,
        )
    if mirror_rows is None or max(mirror_rows, change_rows) > DRIVER_WRITE_ROWS:
        return None
    if set(table.protocol().reader_features or []) - PLAIN_PARQUET_READER_FEATURES:
        return None
    target = pa.schema(table.schema().to_arrow())
    keys = [stored_name(k) for k in key_columns]
    stored = encode_rows(changes.schema, changes.read())
    source = last_changes_as(target, stored, keys, snapshot_lsn, ACTION)
    columns = target.names
    text = to_json(properties)
    on = " AND ".join(f"t.{delta_rs_name(k)} = s.{delta_rs_name(k)}" for k in keys)
    merger = table.merge(
        source=source,
        predicate=on,
        source_alias="s",
        target_alias="t",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
    ).when_matched_delete(predicate=f"s.{delta_rs_name(ACTION)} = {DELETE}")
    others = [c for c in columns if c not in keys]
    if others:
        merger = merger.when_matched_update(
            updates={delta_rs_name(c): f"s.{delta_rs_name(c)}" for c in others}
        )
    merger = merger.when_not_matched_insert(
        updates={delta_rs_name(c): f"s.{delta_rs_name(c)}" for c in columns},
        predicate=f"s.{delta_rs_name(ACTION)} <> {DELETE}",
    )
    try:
        merger.execute()
    except DeltaError as exc:  # lost to a concurrent commit, ...: Spark merges it
        log.warning("delta-rs could not merge into %s (%s); Spark merges it", uri, exc)
        return None
    published = store.newest_commit(key_path, dict(properties))
    if published.user_metadata != text:
        return None  # the MERGE made no commit: Spark's records the properties
    return published


def driver_merge_multiset(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published | None:
    """:func:`.spark_merges.spark_merge_multiset` in the driver, for a small range: the same commit,
    with deletion vectors written there
    (:func:`.merge_with_deletion_vectors.deletion_vector_merge_multiset`). A mirror created small,
    by delta-rs, gets deletion vectors first: the commit Spark's ``ALTER TABLE`` would make, made
    here (:func:`.deletion_vector_commits.deletion_vectors_turned_on`), else by Spark. None,
    nothing committed, where Spark must merge."""
    uri = store.location(key_path)
    if not is_local(uri) or not (local_path(uri) / "_delta_log").is_dir():
        return None  # (a file-system check: the calls below read the log)
    deletion_vectors_turned_on(local_path(uri))
    # what the driver could not turn on (Change Data Feed, a log it does not write): by Spark;
    # nothing left to turn on, no Spark job
    turn_on_mirror_properties(spark, store, key_path)
    return merge_with_deletion_vectors.deletion_vector_merge_multiset(
        store, key_path, changes, snapshot_lsn=snapshot_lsn, properties=properties
    )
