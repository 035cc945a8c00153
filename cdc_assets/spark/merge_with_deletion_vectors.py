"""A small range merged into a large mirror in the driver, with deletion vectors: what Spark's
``MERGE INTO`` commits, without its Spark jobs (keyed mirrors:
:func:`deletion_vector_merge_keyed`; keyless ones, multisets whose row is its identity:
:func:`deletion_vector_merge_multiset`).

Spark's MERGE of ten changes into a mirror of ten million rows writes a few kilobytes but runs about
twenty Spark jobs and their query planning: seconds, whatever the table's size, which is what keeps
a mirror's freshness and a range's cost from following its changes. delta-rs merges in milliseconds
but writes no deletion vectors, and a large mirror has them (Spark's MERGE turned them on). So for a
small range (:data:`.driver_merges.DRIVER_MERGE_ROWS` change rows) into a mirror on a local file
system, its keys in files of at most :data:`.deletion_vector_files.DRIVER_SCAN_ROWS` rows, this
module makes the commit itself, as the Delta protocol says:

1. the table's log is read (:mod:`.delta_log`): its live files, their statistics and vectors;
2. the range's last change per key is computed in Arrow (the same rule as Spark's path);
3. the files whose key statistics can hold a changed key are read (key columns only) and the
   positions of the changed keys found, rows an older vector deleted left out;
4. written: one Parquet file of the new and updated rows (with statistics), one Change Data Feed
   file (``insert``, ``update_preimage``/``update_postimage``, ``delete``), one file holding the
   touched files' new deletion vectors (old ∪ new positions);
5. one commit: each touched file removed with its old vector and added with the new one, the new
   files added, the mirror's properties as ``userMetadata`` and Spark's operation metrics.

Columns stored otherwise (``time`` as text, names escaped: :mod:`.stored_columns`) are written
in the form Spark's MERGE writes. Nothing is committed, and None returned so that Spark merges,
when the table has a feature this module does not write (only deletion vectors, Change Data
Feed, timestampNtz and the implied legacy features are), partitions, a checkpoint it does not
read, or when another writer committed the same version first. A commit of a checkpoint version
(every ``delta.checkpointInterval``) is followed by its checkpoint, as Spark's is (written by
delta-rs), so the log keeps its checkpoints however many commits come from here.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64

from . import deletion_vectors, delta_log
from .asset_store import AssetStore
from .commit_metadata import Published
from .deletion_vector_commits import (
    commit_actions,
    keyed_parameters,
    multiset_parameters,
    writable_log,
)
from .deletion_vector_files import (
    DRIVER_SCAN_ROWS,
    MATCH,
    Touched,
    arrow_schema,
    candidate_files,
    change_feed_rows,
    column_bounds,
    conformed,
    file_actions,
    held_positions,
    record_count,
    row_positions,
)
from .driver_writes import RowsInDriver
from .mirror_merge import DELETE, NET, OPERATION, last_changes_as, net_counts_in_driver
from .stored_columns import encode_rows, stored_name

log = logging.getLogger(__name__)

# A keyless range is merged here when the files that may hold its rows have at most this many:
# they are read whole (every column is the row's identity), one file at a time (memory: a file's
# rows). Changes spread over a table make every file a candidate, so this bounds the table: at
# 1M rows (the limit was 1M) a 10-change range went to Spark's MERGE, 23-35 s on 2 cores; the
# driver merges it in 0.69 s, 1,000 changes in 0.98 s (benchmarks/mirror_merge.py, keyless).
MULTISET_SCAN_ROWS = 5_000_000


def deletion_vector_merge_keyed(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published | None:
    """Apply ``changes`` to the keyed mirror (deletion vectors on) as Spark's MERGE would; None,
    nothing committed, where Spark must merge (module docstring)."""
    found = writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    started = time.perf_counter()
    target = arrow_schema(state.metadata["schemaString"])
    # the changes and keys as the mirror stores them (time as text, names escaped)
    key_columns = [stored_name(k) for k in key_columns]
    stored = encode_rows(changes.schema, changes.read())
    source = last_changes_as(target, stored, key_columns, snapshot_lsn, OPERATION)
    keys = source.select(list(key_columns)).append_column(
        MATCH, pa.array(range(len(source)), pa.int64())
    )
    found = matches(table, state, target, key_columns, keys)
    if found is None:
        return None
    touched, before, matched = found
    action = source.column(OPERATION)
    is_match = pc.is_in(keys.column(MATCH), pa.array(list(matched), pa.int64()))
    deleting = pc.equal(action, DELETE)
    written = source.filter(pc.invert(deleting)).drop_columns([OPERATION])
    inserted = source.filter(pc.and_(pc.invert(deleting), pc.invert(is_match)))
    updated = source.filter(pc.and_(pc.invert(deleting), is_match))
    if not touched and inserted.num_rows == 0:
        return None  # nothing changes: Spark's path records the properties
    deleted_keys = set(keys.filter(pc.and_(deleting, is_match)).column(MATCH).to_pylist())
    feed = change_feed_rows(target, before, deleted_keys, updated, inserted)
    adds, metrics = file_actions(table, touched, written, feed)
    metrics.update(
        numSourceRows=len(source),
        numTargetRowsInserted=inserted.num_rows,
        numTargetRowsUpdated=updated.num_rows,
        numTargetRowsMatchedUpdated=updated.num_rows,
        numTargetRowsDeleted=len(deleted_keys),
        numTargetRowsMatchedDeleted=len(deleted_keys),
        numTargetRowsCopied=0,
        numOutputRows=written.num_rows,
        numTargetRowsNotMatchedBySourceUpdated=0,
        numTargetRowsNotMatchedBySourceDeleted=0,
        executionTimeMs=int((time.perf_counter() - started) * 1000),
    )
    return commit_actions(
        table, uri, state, keyed_parameters(key_columns), adds, metrics, properties
    )


def deletion_vector_merge_multiset(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published | None:
    """Apply ``changes`` to the keyless mirror (deletion vectors on) as Spark's MERGE of
    :func:`.spark_merges.spark_merge_multiset` would: every copy of each distinct row the changes
    touch is deleted (its position added to its file's vector) and the row written again as
    many times as it now occurs; rows compare null-safe in every column, as ``<=>`` does.
    Nothing changes when the changes cancel out: the table's version, not committed. None,
    nothing committed, where Spark must merge (module docstring; the files that may hold the
    rows above :data:`MULTISET_SCAN_ROWS`), and where a count would go negative: Spark's MERGE
    then fails saying so (:data:`.mirror_merge.MISSING_ROW`)."""
    found = writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    started = time.perf_counter()
    target = arrow_schema(state.metadata["schemaString"])
    stored = encode_rows(changes.schema, changes.read())
    net = net_counts_in_driver(target, stored, snapshot_lsn)
    if net.num_rows == 0:  # the changes cancel out
        counts = {"numTargetRowsInserted": 0, "numTargetRowsDeleted": 0}
        return Published(uri, state.version, dict(properties), counts, committed=False)
    rows = net.drop_columns([NET])
    uniques = [pc.unique(rows.column(i).combine_chunks()) for i in range(rows.num_columns)]
    codes = value_codes(rows, uniques).append_column(MATCH, pa.array(range(len(rows)), pa.int64()))
    candidates = multiset_candidates(state, rows)
    if sum(record_count(add) for add in candidates) > MULTISET_SCAN_ROWS:
        return None
    touched: list[Touched] = []
    before = [target.append(pa.field(MATCH, pa.int64())).empty_table()]
    held = [0] * len(rows)  # the mirror's copies of each distinct row
    for add in candidates:
        path = table / unquote(add["path"])
        old = deletion_vectors.read(table, add.get("deletionVector"))
        data = conformed(pq.read_table(path), target)
        found = held_positions(value_codes(data, uniques), codes, old)
        if found is None:
            continue
        positions, sources = found
        for source in sources:
            held[source] += 1
        touched.append((add, old, BitMap64(positions)))
        taken = data.take(pa.array(positions, pa.int64()))
        before.append(taken.append_column(MATCH, pa.array(sources, pa.int64())))
    after = [h + n for h, n in zip(held, net.column(NET).to_pylist(), strict=True)]
    if any(count < 0 for count in after):
        log.warning("%s: the changes remove a row the mirror does not hold; Spark merges", uri)
        return None
    inserted = rows.take(pa.array([i for i, n in enumerate(after) for _ in range(n)], pa.int64()))
    deleted = sum(held)
    feed = change_feed_rows(
        target, pa.concat_tables(before), set(range(len(rows))), target.empty_table(), inserted
    )
    adds, metrics = file_actions(table, touched, inserted, feed)
    metrics.update(
        numSourceRows=len(rows) + inserted.num_rows,
        numTargetRowsInserted=inserted.num_rows,
        numTargetRowsUpdated=0,
        numTargetRowsMatchedUpdated=0,
        numTargetRowsDeleted=deleted,
        numTargetRowsMatchedDeleted=deleted,
        numTargetRowsCopied=0,
        numOutputRows=inserted.num_rows,
        numTargetRowsNotMatchedBySourceUpdated=0,
        numTargetRowsNotMatchedBySourceDeleted=0,
        executionTimeMs=int((time.perf_counter() - started) * 1000),
    )
    parameters = multiset_parameters(target.names)
    return commit_actions(table, uri, state, parameters, adds, metrics, properties)


def value_codes(rows: pa.Table, uniques: Sequence[pa.Array]) -> pa.Table:
    """Per row of ``rows``, per column, the position of its value among that column's
    ``uniques`` (null where it is not among them; a null finds a null there): rows compared
    null-safe as integer columns, which Arrow's join compares."""
    return pa.table(
        {
            f"__cdc_code{i}": pc.index_in(rows.column(i), value_set=values, skip_nulls=False)
            for i, values in enumerate(uniques)
        }
    )


def multiset_candidates(state: delta_log.TableLog, rows: pa.Table) -> list[dict[str, Any]]:
    """The live files whose statistics can hold one of ``rows`` (a file is left out when a
    column's bounds and null count exclude every value the rows have in it)."""
    columns = []
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        values = column.to_pylist()
        present = sorted({v for v in values if v is not None})
        columns.append((name, column.type, present, len(present) < len(values)))
    chosen = []
    for add in state.files.values():
        if all(_may_hold(add, *column) for column in columns):
            chosen.append(add)
    return chosen


def _may_hold(
    add: Mapping[str, Any], column: str, kind: pa.DataType, values: list[Any], null: bool
) -> bool:
    """Whether the file's statistics allow one of ``values`` (sorted), or a null (``null``),
    in ``column``."""
    if null:
        try:
            if int(json.loads(add.get("stats") or "{}")["nullCount"][column]) > 0:
                return True
        except (KeyError, TypeError, ValueError):
            return True
    low, high = column_bounds(add, column, kind)
    if low is None or high is None:
        return True
    at = bisect.bisect_left(values, low)
    return at < len(values) and values[at] <= high


def matches(
    table: Path,
    state: delta_log.TableLog,
    target: pa.Schema,
    key_columns: Sequence[str],
    keys: pa.Table,
) -> tuple[list[Touched], pa.Table, BitMap64] | None:
    """The live rows holding one of ``keys``: per file touched its vectors, their old rows (with the
    ``keys`` row each holds) and which ``keys`` rows matched; None when the files that may hold them
    are more than the driver reads (:data:`.deletion_vector_files.DRIVER_SCAN_ROWS`)."""
    candidates = candidate_files(state, target, key_columns, keys)
    if sum(record_count(add) for add in candidates) > DRIVER_SCAN_ROWS:
        return None
    touched: list[Touched] = []
    old_rows = [target.append(pa.field(MATCH, pa.int64())).empty_table()]
    matched = BitMap64()
    for add in candidates:
        path = table / unquote(add["path"])
        old = deletion_vectors.read(table, add.get("deletionVector"))
        found = row_positions(path, key_columns, keys, old)
        if found is None:
            continue
        positions, sources = found
        matched.update(sources)
        touched.append((add, old, BitMap64(positions)))
        rows = conformed(pq.read_table(path), target).take(pa.array(positions, pa.int64()))
        old_rows.append(rows.append_column(MATCH, pa.array(sources, pa.int64())))
    return touched, pa.concat_tables(old_rows), matched
