"""A small range merged into a large mirror in the driver, with deletion vectors: what Spark's
``MERGE INTO`` commits, without its Spark jobs (keyed mirrors:
:func:`deletion_vector_merge_keyed`; keyless ones, multisets whose row is its identity:
:func:`deletion_vector_merge_multiset`).

Spark's MERGE of ten changes into a mirror of ten million rows writes a few kilobytes but runs
about twenty Spark jobs and their query planning: seconds, whatever the table's size, which is
what keeps a mirror's freshness and a range's cost from following its changes. delta-rs merges
in milliseconds but writes no deletion vectors, and a large mirror has them (Spark's MERGE turned
them on). So for a small range (:data:`.driver_merges.DRIVER_MERGE_ROWS` change rows) into a
mirror on a local file system, its keys in files of at most :data:`DRIVER_SCAN_ROWS` rows, this
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
import datetime as dt
import json
import logging
import time
import uuid
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
from .commit_metadata import Published, to_json
from .delta_location import is_local, local_path
from .driver_writes import RowsInDriver
from .mirror_merge import DELETE, NET, OPERATION, last_changes_as, net_counts_in_driver
from .stored_columns import encode_rows, stored_name

log = logging.getLogger(__name__)

WRITER_FEATURES = frozenset(
    {
        "deletionVectors",
        "changeDataFeed",
        "timestampNtz",
        # legacy features: nothing to do while the table uses none of them (_writable)
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    }
)
# what a schema holds when it uses invariants, generated or identity columns
UNUSED_FEATURE_MARKS = ("delta.invariants", "delta.generationExpression", "delta.identity")
READER_FEATURES = frozenset({"deletionVectors", "timestampNtz"})
CHECKPOINT_INTERVAL = 10  # Delta's default delta.checkpointInterval
# A range (of at most .mirror_store.DRIVER_MERGE_ROWS change rows) is merged here when the files
# that may hold its keys have at most this many rows: the files a change touches are read whole
# (its old row is the change feed's preimage), so a range spread over a huge table goes to
# Spark, whose executors read them in parallel.
DRIVER_SCAN_ROWS = 10_000_000
# A keyless range is merged here when the files that may hold its rows have at most this many:
# they are read whole (every column is the row's identity).
MULTISET_SCAN_ROWS = 1_000_000
STRING_STATS_PREFIX = 32  # Spark's statistics keep 32 characters of a string
CHANGE_TYPE = "_change_type"
ROW = "__cdc_row"
_MATCH = "__cdc_match"
Touched = tuple[dict[str, Any], BitMap64, BitMap64]  # a file's add action, old and new vector


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
    found = _writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    started = time.perf_counter()
    target = _arrow_schema(state.metadata["schemaString"])
    # the changes and keys as the mirror stores them (time as text, names escaped)
    key_columns = [stored_name(k) for k in key_columns]
    stored = encode_rows(changes.schema, changes.read())
    source = last_changes_as(target, stored, key_columns, snapshot_lsn, OPERATION)
    keys = source.select(list(key_columns)).append_column(
        _MATCH, pa.array(range(len(source)), pa.int64())
    )
    found = _matches(table, state, target, key_columns, keys)
    if found is None:
        return None
    touched, before, matched = found
    action = source.column(OPERATION)
    is_match = pc.is_in(keys.column(_MATCH), pa.array(list(matched), pa.int64()))
    deleting = pc.equal(action, DELETE)
    written = source.filter(pc.invert(deleting)).drop_columns([OPERATION])
    inserted = source.filter(pc.and_(pc.invert(deleting), pc.invert(is_match)))
    updated = source.filter(pc.and_(pc.invert(deleting), is_match))
    if not touched and inserted.num_rows == 0:
        return None  # nothing changes: Spark's path records the properties
    deleted_keys = set(keys.filter(pc.and_(deleting, is_match)).column(_MATCH).to_pylist())
    feed = _change_feed(target, before, deleted_keys, updated, inserted)
    adds, metrics = _file_actions(table, touched, written, feed)
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
    return _commit(table, uri, state, _keyed_parameters(key_columns), adds, metrics, properties)


def _writable_log(
    store: AssetStore, key_path: Sequence[str]
) -> tuple[Path, str, delta_log.TableLog] | None:
    """The table's folder, URI and log, when it is local and this module writes what its
    protocol asks (:func:`_writable`); None when Spark must write it."""
    uri = store.location(key_path)
    if not is_local(uri):
        return None
    table = local_path(uri)
    state = delta_log.read(table)
    if state is None or not _writable(state):
        return None
    return table, uri, state


def _commit(
    table: Path,
    uri: str,
    state: delta_log.TableLog,
    parameters: Mapping[str, str],
    adds: list[dict[str, Any]],
    metrics: Mapping[str, int],
    properties: Mapping[str, Any],
) -> Published | None:
    """The next version: ``adds`` and a MERGE's commitInfo; None when another writer made it."""
    text = to_json(properties)
    version = state.version + 1
    info = _commit_info(state, parameters, metrics, text)
    if not delta_log.commit(table, version, [info, *adds]):
        log.warning("%s: version %d was committed by another writer; Spark merges", uri, version)
        return None
    if version % _checkpoint_interval(state) == 0:
        _write_checkpoint(table, version)
    return Published(uri, version, dict(properties), dict(metrics), text)


def _write_checkpoint(table: Path, version: int) -> None:
    """The checkpoint of ``version``, as Spark's commit of a checkpoint version writes one (every
    ``delta.checkpointInterval``), so the log stays short for every reader however many commits
    come from here. delta-rs writes it (one Parquet file, deletion vectors and column mapping
    kept; Spark, DuckDB and :mod:`.delta_log` read it). The commit stands if it fails: the next
    checkpoint version writes one."""
    from deltalake import DeltaTable

    started = time.perf_counter()
    try:
        DeltaTable(str(table), version=version).create_checkpoint()
    except Exception as error:  # a checkpoint is an optimisation; the commit is made
        log.warning("%s: no checkpoint of version %d: %s", table, version, error)
        return
    log.info(
        "%s: checkpoint of version %d in %.2f s", table, version, time.perf_counter() - started
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
    found = _writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    started = time.perf_counter()
    target = _arrow_schema(state.metadata["schemaString"])
    stored = encode_rows(changes.schema, changes.read())
    net = net_counts_in_driver(target, stored, snapshot_lsn)
    if net.num_rows == 0:  # the changes cancel out
        counts = {"numTargetRowsInserted": 0, "numTargetRowsDeleted": 0}
        return Published(uri, state.version, dict(properties), counts, committed=False)
    rows = net.drop_columns([NET])
    uniques = [pc.unique(rows.column(i).combine_chunks()) for i in range(rows.num_columns)]
    codes = _codes(rows, uniques).append_column(_MATCH, pa.array(range(len(rows)), pa.int64()))
    candidates = _multiset_candidates(state, rows)
    if sum(_records(add) for add in candidates) > MULTISET_SCAN_ROWS:
        return None
    touched: list[Touched] = []
    before = [target.append(pa.field(_MATCH, pa.int64())).empty_table()]
    held = [0] * len(rows)  # the mirror's copies of each distinct row
    for add in candidates:
        path = table / unquote(add["path"])
        old = deletion_vectors.read(table, add.get("deletionVector"))
        data = _conformed(pq.read_table(path), target)
        found = _held_positions(_codes(data, uniques), codes, old)
        if found is None:
            continue
        positions, sources = found
        for source in sources:
            held[source] += 1
        touched.append((add, old, BitMap64(positions)))
        taken = data.take(pa.array(positions, pa.int64()))
        before.append(taken.append_column(_MATCH, pa.array(sources, pa.int64())))
    after = [h + n for h, n in zip(held, net.column(NET).to_pylist(), strict=True)]
    if any(count < 0 for count in after):
        log.warning("%s: the changes remove a row the mirror does not hold; Spark merges", uri)
        return None
    inserted = rows.take(pa.array([i for i, n in enumerate(after) for _ in range(n)], pa.int64()))
    deleted = sum(held)
    feed = _change_feed(
        target, pa.concat_tables(before), set(range(len(rows))), target.empty_table(), inserted
    )
    adds, metrics = _file_actions(table, touched, inserted, feed)
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
    parameters = _multiset_parameters(target.names)
    return _commit(table, uri, state, parameters, adds, metrics, properties)


def _codes(rows: pa.Table, uniques: Sequence[pa.Array]) -> pa.Table:
    """Per row of ``rows``, per column, the position of its value among that column's
    ``uniques`` (null where it is not among them; a null finds a null there): rows compared
    null-safe as integer columns, which Arrow's join compares."""
    return pa.table(
        {
            f"__cdc_code{i}": pc.index_in(rows.column(i), value_set=values, skip_nulls=False)
            for i, values in enumerate(uniques)
        }
    )


def _multiset_candidates(state: delta_log.TableLog, rows: pa.Table) -> list[dict[str, Any]]:
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
    low, high = _bounds(add, column, kind)
    if low is None or high is None:
        return True
    at = bisect.bisect_left(values, low)
    return at < len(values) and values[at] <= high


def _matches(
    table: Path,
    state: delta_log.TableLog,
    target: pa.Schema,
    key_columns: Sequence[str],
    keys: pa.Table,
) -> tuple[list[Touched], pa.Table, BitMap64] | None:
    """The live rows holding one of ``keys``: per file touched its vectors, their old rows
    (with the ``keys`` row each holds) and which ``keys`` rows matched; None when the files
    that may hold them are more than the driver reads (:data:`DRIVER_SCAN_ROWS`)."""
    candidates = _candidates(state, target, key_columns, keys)
    if sum(_records(add) for add in candidates) > DRIVER_SCAN_ROWS:
        return None
    touched: list[Touched] = []
    old_rows = [target.append(pa.field(_MATCH, pa.int64())).empty_table()]
    matched = BitMap64()
    for add in candidates:
        path = table / unquote(add["path"])
        old = deletion_vectors.read(table, add.get("deletionVector"))
        found = _positions(path, key_columns, keys, old)
        if found is None:
            continue
        positions, sources = found
        matched.update(sources)
        touched.append((add, old, BitMap64(positions)))
        rows = _conformed(pq.read_table(path), target).take(pa.array(positions, pa.int64()))
        old_rows.append(rows.append_column(_MATCH, pa.array(sources, pa.int64())))
    return touched, pa.concat_tables(old_rows), matched


def _keyed_parameters(key_columns: Sequence[str]) -> dict[str, str]:
    """The operationParameters of the keyed MERGE (as :func:`.spark_merges.spark_merge_keyed`)."""
    return {
        "predicate": json.dumps([" AND ".join(f"t.{k} = s.{k}" for k in key_columns)]),
        "matchedPredicates": json.dumps(
            [
                {"predicate": f"s.action = {DELETE}", "actionType": "delete"},
                {"actionType": "update"},
            ]
        ),
        "notMatchedPredicates": json.dumps(
            [{"predicate": f"s.action <> {DELETE}", "actionType": "insert"}]
        ),
        "notMatchedBySourcePredicates": "[]",
    }


def _multiset_parameters(columns: Sequence[str]) -> dict[str, str]:
    """The operationParameters of the keyless MERGE (as
    :func:`.spark_merges.spark_merge_multiset`)."""
    on = " AND ".join(f"t.{c} <=> s.{c}" for c in columns)
    return {
        "predicate": json.dumps([f"s.action = 'd' AND {on}"]),
        "matchedPredicates": json.dumps([{"actionType": "delete"}]),
        "notMatchedPredicates": json.dumps(
            [{"predicate": "s.action = 'i'", "actionType": "insert"}]
        ),
        "notMatchedBySourcePredicates": "[]",
    }


def _commit_info(
    state: delta_log.TableLog, parameters: Mapping[str, str], metrics: Mapping[str, int], text: str
) -> dict[str, Any]:
    """The commit's ``commitInfo``: a MERGE with Spark's metric names, ``text`` its
    userMetadata."""
    return {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": "MERGE",
            "operationParameters": dict(parameters),
            "readVersion": state.version,
            "isolationLevel": "Serializable",
            "isBlindAppend": False,
            "operationMetrics": {k: str(v) for k, v in metrics.items()},
            "userMetadata": text,
            "engineInfo": "cdc_assets (deletion vectors in the driver)",
            "txnId": str(uuid.uuid4()),
        }
    }


def _writable(state: delta_log.TableLog) -> bool:
    """Whether the table's protocol asks only for what this module writes: deletion vectors,
    Change Data Feed, timestamp_ntz, and legacy features (implied when Spark upgraded an older
    protocol) that ask nothing of a writer while the table uses none of them."""
    protocol, metadata = state.protocol, state.metadata
    configuration = metadata.get("configuration") or {}
    schema = metadata.get("schemaString", "")
    return (
        configuration.get("delta.enableDeletionVectors") == "true"
        and configuration.get("delta.appendOnly") != "true"
        and configuration.get("delta.columnMapping.mode", "none") == "none"
        and not any(k.startswith("delta.constraints.") for k in configuration)
        and not metadata.get("partitionColumns")
        and int(protocol.get("minWriterVersion", 0)) == 7
        and int(protocol.get("minReaderVersion", 0)) == 3
        and set(protocol.get("writerFeatures") or []) <= WRITER_FEATURES
        and set(protocol.get("readerFeatures") or []) <= READER_FEATURES
        and not any(word in schema for word in UNUSED_FEATURE_MARKS)
    )


def _checkpoint_interval(state: delta_log.TableLog) -> int:
    configuration = state.metadata.get("configuration") or {}
    return int(configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL))


def _arrow_schema(schema_string: str) -> pa.Schema:
    from deltalake import Schema

    return pa.schema(Schema.from_json(schema_string).to_arrow())


def _candidates(
    state: delta_log.TableLog, target: pa.Schema, key_columns: Sequence[str], keys: pa.Table
) -> list[dict[str, Any]]:
    """The live files whose statistics can hold one of ``keys`` (all when they do not say)."""
    first = key_columns[0]
    kind = target.field(first).type
    values = sorted(v for v in keys.column(first).to_pylist() if v is not None)
    chosen = []
    for add in state.files.values():
        low, high = _bounds(add, first, kind)
        if low is not None and high is not None:
            at = bisect.bisect_left(values, low)
            if at == len(values) or values[at] > high:
                continue
        chosen.append(add)
    return chosen


def _records(add: Mapping[str, Any]) -> int:
    """The file's rows by its statistics (more than may be read here when they do not say)."""
    try:
        return int(json.loads(add.get("stats") or "{}")["numRecords"])
    except (KeyError, TypeError, ValueError):
        return DRIVER_SCAN_ROWS + 1


def _bounds(add: Mapping[str, Any], column: str, kind: pa.DataType) -> tuple[Any, Any]:
    """The file's minimum and maximum of ``column`` from its statistics, (None, None) when they
    are missing or of a type not compared here."""
    try:
        stats = json.loads(add.get("stats") or "{}")
        low, high = stats["minValues"][column], stats["maxValues"][column]
    except (KeyError, TypeError, ValueError):
        return None, None
    if pa.types.is_integer(kind) and isinstance(low, int) and isinstance(high, int):
        return low, high
    if pa.types.is_date(kind):
        return dt.date.fromisoformat(low), dt.date.fromisoformat(high)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        # a maximum Spark truncated is followed by a character above the rest (a tie breaker)
        return low, high
    return None, None


def _positions(
    path: Path, key_columns: Sequence[str], keys: pa.Table, deleted: BitMap64
) -> tuple[list[int], list[int]] | None:
    """The live rows of the file at ``path`` holding one of ``keys``: their positions and, for
    each, the row of ``keys`` it holds (None when none)."""
    return _held_positions(pq.read_table(path, columns=list(key_columns)), keys, deleted)


def _held_positions(
    held: pa.Table, keys: pa.Table, deleted: BitMap64
) -> tuple[list[int], list[int]] | None:
    """:func:`_positions` of a file's rows read already (``held``: the columns of ``keys``
    but its last, :data:`_MATCH`)."""
    key_columns = held.column_names
    held = held.append_column(ROW, pa.array(range(held.num_rows), pa.int64()))
    joined = held.join(keys, keys=list(key_columns), join_type="inner")
    if joined.num_rows == 0:
        return None
    pairs = sorted(
        (row, match)
        for row, match in zip(
            joined.column(ROW).to_pylist(), joined.column(_MATCH).to_pylist(), strict=True
        )
        if row not in deleted
    )
    if not pairs:
        return None
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _change_feed(
    target: pa.Schema,
    before: pa.Table,
    deleted_keys: set[int],
    updated: pa.Table,
    inserted: pa.Table,
) -> pa.Table:
    """The commit's Change Data Feed rows: old rows as ``delete`` or ``update_preimage``, new
    ones as ``update_postimage`` or ``insert``."""
    gone = pc.is_in(before.column(_MATCH), pa.array(sorted(deleted_keys), pa.int64()))
    parts = [
        (before.filter(gone), "delete"),
        (before.filter(pc.invert(gone)), "update_preimage"),
        (updated, "update_postimage"),
        (inserted, "insert"),
    ]
    tables = [
        rows.select(target.names).append_column(
            CHANGE_TYPE, pa.array([kind] * rows.num_rows, pa.string())
        )
        for rows, kind in parts
    ]
    return pa.concat_tables(tables)


def _file_actions(
    table: Path,
    touched: Sequence[Touched],
    written: pa.Table,
    feed: pa.Table,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Writes the new data, change and vector files; the commit's file actions and metrics."""
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = []
    metrics = {"numTargetFilesAdded": 0, "numTargetBytesAdded": 0, "numTargetChangeFilesAdded": 0}
    if written.num_rows:
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        size = _write_parquet(written, table / name)
        actions.append(
            {
                "add": {
                    "path": name,
                    "partitionValues": {},
                    "size": size,
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": json.dumps(_statistics(written), separators=(",", ":")),
                }
            }
        )
        metrics.update(numTargetFilesAdded=1, numTargetBytesAdded=size)
    if feed.num_rows:
        name = f"_change_data/cdc-00000-{uuid.uuid4()}.c000.snappy.parquet"
        (table / "_change_data").mkdir(exist_ok=True)
        size = _write_parquet(feed, table / name)
        actions.append(
            {"cdc": {"path": name, "partitionValues": {}, "size": size, "dataChange": False}}
        )
        metrics["numTargetChangeFilesAdded"] = 1
    vectors = deletion_vectors.write(table, [old | new for _, old, new in touched])
    added = updated = 0
    for (add, old, _), vector in zip(touched, vectors, strict=True):
        kept = {k: add[k] for k in ("path", "partitionValues", "size", "tags") if k in add}
        stats = json.loads(add["stats"]) if add.get("stats") else None
        if stats is not None:
            stats["tightBounds"] = False
        actions.append(
            {
                "add": {
                    **kept,
                    "modificationTime": add.get("modificationTime", now),
                    "dataChange": True,
                    **({"stats": json.dumps(stats, separators=(",", ":"))} if stats else {}),
                    "deletionVector": vector,
                }
            }
        )
        old_vector = add.get("deletionVector")
        actions.append(
            {
                "remove": {
                    **{k: add[k] for k in ("path", "partitionValues", "size") if k in add},
                    "deletionTimestamp": now,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    **({"deletionVector": old_vector} if old_vector else {}),
                }
            }
        )
        added += not old
        updated += bool(old)
    metrics.update(
        numTargetDeletionVectorsAdded=added,
        numTargetDeletionVectorsUpdated=updated,
        numTargetDeletionVectorsRemoved=0,
        numTargetFilesRemoved=0,
        numTargetBytesRemoved=0,
    )
    return actions, metrics


def _conformed(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """A data file's rows with the table's columns and types (a column the file lacks: nulls)."""
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(len(rows))
        for f in target
    ]
    return pa.Table.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, target, strict=True)],
        schema=target,
    )


def _write_parquet(rows: pa.Table, path: Path) -> int:
    pq.write_table(rows, path, compression="snappy")
    return path.stat().st_size


def _statistics(rows: pa.Table) -> dict[str, Any]:
    """Delta's file statistics: row and null counts, and the minimum and maximum of the columns
    whose bounds are exact in JSON (integers, dates, short strings)."""
    low: dict[str, Any] = {}
    high: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, column in zip(rows.column_names, rows.columns, strict=True):
        nulls[name] = column.null_count
        kind = column.type
        if column.null_count == len(column) or not (
            pa.types.is_integer(kind) or pa.types.is_date(kind) or pa.types.is_string(kind)
        ):
            continue
        bounds = pc.min_max(column)
        lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        if pa.types.is_date(kind):
            lo, hi = lo.isoformat(), hi.isoformat()
        if isinstance(lo, str):
            if len(hi) > STRING_STATS_PREFIX:
                continue  # a truncated maximum would not be an upper bound
            lo = lo[:STRING_STATS_PREFIX]
        low[name], high[name] = lo, hi
    return {
        "numRecords": rows.num_rows,
        "minValues": low,
        "maxValues": high,
        "nullCount": nulls,
        "tightBounds": True,
    }
