"""The writer compacts its own small files, right after its own commit (Delta's "auto
compaction"): :func:`compact_after_commit`, the one function every store's commit is followed
by (the IO manager's ``write_output``, the sync state's write).

Every range adds a file to each table it touches, a range every few seconds: left alone, that is
hundreds of files per table an hour, and every read opens them all. A compaction run beside the
sync loses to it (Spark's OPTIMIZE of a mirror fails with ``DELTA_CONCURRENT_DELETE_READ`` when a
range's MERGE marks rows of a file it rewrites) and costs minutes of the cores. Here the run that
wrote a table compacts it at once: each table's ranges are applied in order by one run at a time
(:mod:`cdc_assets.dagster.sync.range_order`), so the only other writer a compaction can meet is
the maintenance job (VACUUM, a property change, retired partitions dropped), whose commits are
made to win the same way (a lost commit is planned again on the new version).

What is merged and when: :mod:`.small_files` (a tiered policy; a change log's files in partition
order, so consecutive ranges share a file). How:

- a local table whose protocol allows it (:func:`.driver_rewrites.rewritable`) is compacted in the
  driver: the files read with their deletion vectors applied, each group written as one Parquet
  file with statistics, and one commit (``OPTIMIZE``, ``dataChange=false``: change data feed
  readers and a mirror's LSN history do not see it) removes them (with their vectors) and adds the
  new ones; milliseconds for a small table, no Spark job;
- otherwise (an object store, a protocol the driver does not write, more than
  :data:`DRIVER_COMPACT_BYTES` to merge) Spark's OPTIMIZE bin-packs the small files, in the
  writer's run too;
- a change log of the old layout (physically partitioned by ``_cdc_partition``, one file per
  range at least, whatever compaction does) is rewritten once into the one-table layout
  (:mod:`.partition_rows`), said in the log.

A compaction never fails the write it follows: a failure is one warning line, the data commit
stands and the next commit compacts.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from . import delta_log
from .asset_store import AssetStore
from .concurrent_commits import retry_conflicts
from .delta_location import is_local, local_path
from .driver_rewrites import (
    add_action,
    commit_rewrite,
    deleted_rows,
    file_rows,
    file_stats,
    live_rows,
    partition_columns,
    remove_action,
    rewritable,
    table_schema,
)
from .partition_rows import PARTITION_COLUMN, PROPERTIES_COLUMN, SNAPSHOT_PARTITION
from .small_files import DataFile, large_bytes, plan, target_bytes

log = logging.getLogger(__name__)

ATTEMPTS = 3  # a compaction that lost its version to another writer is planned again
PASSES = 4  # commits of one compaction at most (a merged file may complete the next level)
DRIVER_COMPACT_BYTES = 512 << 20  # more than this to rewrite at once: Spark's OPTIMIZE
OPTIMIZE_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"
OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
# OPTIMIZE also rewrites every file with more than this share of its rows deleted (Delta's
# default 0.05: most of a large mirror's key-range files after a day of MERGEs)
OPTIMIZE_DELETED_RATIO = "spark.databricks.delta.optimize.maxDeletedRowsRatio"
# Spark's auto compaction's operation parameters (DESCRIBE HISTORY shows them)
OPTIMIZE_PARAMETERS = {"predicate": "[]", "zOrderBy": "[]", "clusterBy": "[]", "auto": "true"}
LAYOUT_PARAMETERS = {"mode": "Overwrite", "partitionBy": "[]"}


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_after_commit` did to one table (``version``: its commit)."""

    uri: str
    how: str  # "driver", "spark", or "layout" (an old change log rewritten unpartitioned)
    files_removed: int
    files_added: int
    version: int | None
    seconds: float


class _SparkCompacts(Exception):
    """The driver does not compact this table: Spark does."""


def compact_after_commit(
    spark: SparkSession | None, store: AssetStore, key_path: Sequence[str]
) -> Compaction | None:
    """Compact the table at ``key_path`` if :mod:`.small_files` says so (module doc); None when
    nothing was to be done (or done: a failure is a warning, never raised). ``spark``: None
    where the caller has none (the sync state on a local store): then only the driver's path."""
    uri = store.location(key_path)
    started = time.perf_counter()
    try:
        try:
            if not is_local(uri):
                raise _SparkCompacts
            done = _in_driver(local_path(uri), uri, started)
        except _SparkCompacts:
            done = _with_spark(spark, store, key_path, started) if spark is not None else None
        if done is not None:
            log.info(
                "%s: compacted (%s) %d files into %d in %.2f s",
                uri,
                done.how,
                done.files_removed,
                done.files_added,
                done.seconds,
            )
        return done
    except Exception as exc:  # the data commit stands; the next one compacts
        log.warning(
            "%s: compaction failed (%s); the data committed stands, the next write compacts",
            uri,
            first_line(exc),
        )
        return None


def first_line(exc: BaseException) -> str:
    """The error's first line: a Spark error's message without its JVM stack trace (for a
    Py4J error, the Java exception's line after py4j's "An error occurred while calling")."""
    lines = [line.strip().lstrip(": ") for line in str(exc).strip().splitlines()]
    lines = [line for line in lines if line and not line.startswith("An error occurred while")]
    return lines[0] if lines else type(exc).__name__


def _in_driver(table: Path, uri: str, started: float) -> Compaction | None:
    """Commits until the policy has nothing more to merge (a merged file may complete a group
    of the next level: at most :data:`PASSES`), each planned anew when another writer took its
    version (at most :data:`ATTEMPTS` times); what was done, in all."""
    done: list[Compaction] = []
    lost = 0
    while len(done) < PASSES and lost < ATTEMPTS:
        state = delta_log.read(table)
        if state is None or not rewritable(state):
            if done:
                break
            raise _SparkCompacts
        if partition_columns(state) == [PARTITION_COLUMN]:
            step = _unpartition(table, uri, state, started)
        elif partition_columns(state):
            break  # not a table of this project's partition layout: left as it is
        else:
            step = _merge_small_files(table, uri, state, started)
        if step is None:
            break
        if step.version is None:
            lost += 1
            continue
        done.append(step)
    if not done:
        return None  # nothing to do, or lost to other writers each time: the next commit
    return Compaction(
        uri,
        done[0].how,
        sum(d.files_removed for d in done),
        sum(d.files_added for d in done),
        done[-1].version,
        time.perf_counter() - started,
    )


def data_files(state: delta_log.TableLog) -> list[DataFile]:
    """The table's live files as :mod:`.small_files` sees them; a change log's in partition
    order, its snapshot's files a sequence of their own (a re-snapshot replaces them, and
    ``snapshot`` sorts after every range key). A change-log file without statistics of the
    partition column is left out (never merged)."""
    change_log = PARTITION_COLUMN in table_schema(state).names
    found = []
    for key, add in state.files.items():
        stats = file_stats(add)
        order: tuple[Any, ...] = ()
        sequence = None
        if change_log:
            low = (stats.get("minValues") or {}).get(PARTITION_COLUMN)
            high = (stats.get("maxValues") or {}).get(PARTITION_COLUMN)
            if low is None or high is None:
                continue
            order, sequence = (low, high), (low == high == SNAPSHOT_PARTITION)
        found.append(
            DataFile(
                key=key,
                size=int(add.get("size") or 0),
                rows=file_rows(add),
                deleted=deleted_rows(add),
                order=order,
                sequence=sequence,
            )
        )
    return found


def _merge_small_files(
    table: Path, uri: str, state: delta_log.TableLog, started: float
) -> Compaction | None:
    files = data_files(state)
    groups = plan(files, ordered=PARTITION_COLUMN in table_schema(state).names)
    if not groups:
        return None
    if sum(f.size for group in groups for f in group) > DRIVER_COMPACT_BYTES:
        raise _SparkCompacts
    schema = table_schema(state)
    actions: list[dict[str, Any]] = []
    removed_bytes = added_bytes = added = vectors = 0
    for group in groups:
        adds = [state.files[f.key] for f in group]
        actions += [remove_action(a, data_change=False) for a in adds]
        removed_bytes += sum(int(a.get("size") or 0) for a in adds)
        vectors += sum(1 for a in adds if a.get("deletionVector"))
        rows = pa.concat_tables([live_rows(table, a, schema) for a in adds])
        if rows.num_rows:
            action = add_action(table, rows, data_change=False)
            actions.append(action)
            added_bytes += action["add"]["size"]
            added += 1
    removed = sum(len(group) for group in groups)
    metrics = {
        "numRemovedFiles": removed,
        "numAddedFiles": added,
        "numRemovedBytes": removed_bytes,
        "numAddedBytes": added_bytes,
        "numDeletionVectorsRemoved": vectors,
        "numBins": len(groups),
    }
    version = commit_rewrite(table, state, "OPTIMIZE", OPTIMIZE_PARAMETERS, actions, metrics)
    return Compaction(uri, "driver", removed, added, version, time.perf_counter() - started)


def _unpartition(
    table: Path, uri: str, state: delta_log.TableLog, started: float
) -> Compaction | None:
    """A change log of the old layout (partitioned by ``_cdc_partition``) rewritten as one
    unpartitioned table, in one commit: its rows in partition order, in files of about the
    table's target size (the snapshot's apart), the two partition columns first in its schema
    (Spark keeps file statistics of the first 32 columns)."""
    files = sorted(
        state.files.values(),
        key=lambda a: (
            (a.get("partitionValues") or {}).get(PARTITION_COLUMN) == SNAPSHOT_PARTITION,
            (a.get("partitionValues") or {}).get(PARTITION_COLUMN) or "",
        ),
    )
    if sum(int(a.get("size") or 0) for a in files) > DRIVER_COMPACT_BYTES:
        raise _SparkCompacts
    schema = table_schema(state)
    target = target_bytes(
        [DataFile(key=None, size=int(a.get("size") or 0), rows=file_rows(a)) for a in files]
    )
    metadata = {**state.metadata, "partitionColumns": [], "schemaString": _first_columns(state)}
    actions: list[dict[str, Any]] = [{"metaData": metadata}]
    actions += [remove_action(a, data_change=True) for a in files]
    batch: list[pa.Table] = []
    size = 0
    for i, add in enumerate(files):
        batch.append(live_rows(table, add, schema))
        size += int(add.get("size") or 0)
        last = i == len(files) - 1
        apart = _is_snapshot(add) != _is_snapshot(files[i + 1]) if not last else True
        if last or apart or size >= target:
            rows = pa.concat_tables(batch).select(_ordered(schema.names))
            if rows.num_rows:
                actions.append(add_action(table, rows, data_change=True))
            batch, size = [], 0
    added = sum(1 for a in actions if a.get("add"))
    metrics = {"numFiles": added, "numRemovedFiles": len(files)}
    version = commit_rewrite(table, state, "WRITE", LAYOUT_PARAMETERS, actions, metrics)
    if version is not None:
        log.warning(
            "%s: change log rewritten from the old layout (a folder per partition, %d files) "
            "into one table of %d files, version %d; it stays so",
            uri,
            len(files),
            added,
            version,
        )
    return Compaction(uri, "layout", len(files), added, version, time.perf_counter() - started)


def _is_snapshot(add: Mapping[str, Any]) -> bool:
    return (add.get("partitionValues") or {}).get(PARTITION_COLUMN) == SNAPSHOT_PARTITION


def _ordered(names: Sequence[str]) -> list[str]:
    """The partition and properties columns first, the others as they are."""
    first = [c for c in (PARTITION_COLUMN, PROPERTIES_COLUMN) if c in names]
    return first + [c for c in names if c not in first]


def _first_columns(state: delta_log.TableLog) -> str:
    """The table's schema (its JSON) with the partition and properties columns first."""
    schema = json.loads(state.metadata["schemaString"])
    fields = {f["name"]: f for f in schema["fields"]}
    schema["fields"] = [fields[name] for name in _ordered(list(fields))]
    return json.dumps(schema, separators=(",", ":"))


def _with_spark(
    spark: SparkSession, store: AssetStore, key_path: Sequence[str], started: float
) -> Compaction | None:
    """Spark's share (module doc): an old-layout change log rewritten unpartitioned, or the small
    files :mod:`.small_files` would merge bin-packed by OPTIMIZE."""
    table = store.delta_table(key_path)
    if table is None:
        return None
    uri = store.location(key_path)
    if table.metadata().partition_columns == [PARTITION_COLUMN]:
        return _unpartition_with_spark(spark, uri, len(table.file_uris()), started)
    if table.metadata().partition_columns:
        return None
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    files = [
        DataFile(key=a["path"], size=int(a["size_bytes"]), rows=int(a.get("num_records") or 0))
        for a in actions
    ]
    if not plan(files, ordered=False):
        return None
    target = target_bytes(files)
    sizes = {
        OPTIMIZE_MIN_FILE_SIZE: str(large_bytes(target)),
        OPTIMIZE_MAX_FILE_SIZE: str(target),
        OPTIMIZE_DELETED_RATIO: "0.75",  # as small_files: a quarter of a file's rows left
    }
    with session_settings(spark, sizes):  # this table's sizes, not the next statement's
        result = retry_conflicts(
            lambda: spark.sql(f"OPTIMIZE delta.`{uri}`").collect(), f"compacting {uri}"
        )
    metrics = result[0]["metrics"]
    return Compaction(
        uri,
        "spark",
        int(metrics["numFilesRemoved"]),
        int(metrics["numFilesAdded"]),
        None,
        time.perf_counter() - started,
    )


def _unpartition_with_spark(
    spark: SparkSession, uri: str, files: int, started: float
) -> Compaction:
    """:func:`_unpartition` by Spark (a change log on an object store, or a large one)."""
    rows = spark.read.format("delta").load(uri)
    columns = _ordered(rows.columns)
    rows = rows.select(*[f"`{c}`" for c in columns])
    parts = max(1, math.ceil(files / 64))
    writer = (
        rows.repartitionByRange(parts, PARTITION_COLUMN)
        .sortWithinPartitions(PARTITION_COLUMN)
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
    )
    retry_conflicts(lambda: writer.save(uri), f"rewriting {uri} unpartitioned")
    log.warning(
        "%s: change log rewritten from the old layout (a folder per partition, %d files) into "
        "one table by Spark; it stays so",
        uri,
        files,
    )
    return Compaction(uri, "layout", files, parts, None, time.perf_counter() - started)


@contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` on ``spark``'s SQL conf for the block, each put back as it was (unset
    where it was not set) afterwards, also when the block fails."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
