"""The files a driver-side merge with deletion vectors reads and writes (see
:mod:`.merge_with_deletion_vectors`): the candidate files by their statistics, the positions of
the rows a change removes, the change feed's rows, and the new Parquet files with Spark's
statistics."""

from __future__ import annotations

import bisect
import datetime as dt
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64

from . import deletion_vectors, delta_log

STRING_STATS_PREFIX = 32  # Spark's statistics keep 32 characters of a string ...
# ... and a longer maximum's prefix is followed by a character above the first one cut off
ASCII_MAX, MAX_CHARACTER = "\x7f", "\U0010ffff"

# A range (of at most .driver_merges.DRIVER_MERGE_ROWS change rows) is merged here when the files
# that may hold its keys have at most this many rows: the files a change touches are read whole
# (its old row is the change feed's preimage), so a range spread over a huge table goes to
# Spark, whose executors read them in parallel.
DRIVER_SCAN_ROWS = 10_000_000


CHANGE_TYPE = "_change_type"


ROW = "__cdc_row"


MATCH = "__cdc_match"


Touched = tuple[dict[str, Any], BitMap64, BitMap64]  # a file's add action, old and new vector


def arrow_schema(schema_string: str) -> pa.Schema:
    from deltalake import Schema

    return pa.schema(Schema.from_json(schema_string).to_arrow())


def candidate_files(
    state: delta_log.TableLog, target: pa.Schema, key_columns: Sequence[str], keys: pa.Table
) -> list[dict[str, Any]]:
    """The live files whose statistics can hold one of ``keys`` (all when they do not say)."""
    first = key_columns[0]
    kind = target.field(first).type
    values = sorted(v for v in keys.column(first).to_pylist() if v is not None)
    chosen = []
    for add in state.files.values():
        low, high = column_bounds(add, first, kind)
        if low is not None and high is not None:
            at = bisect.bisect_left(values, low)
            if at == len(values) or values[at] > high:
                continue
        chosen.append(add)
    return chosen


def record_count(add: Mapping[str, Any]) -> int:
    """The file's rows by its statistics (more than may be read here when they do not say)."""
    try:
        return int(json.loads(add.get("stats") or "{}")["numRecords"])
    except (KeyError, TypeError, ValueError):
        return DRIVER_SCAN_ROWS + 1


def column_bounds(add: Mapping[str, Any], column: str, kind: pa.DataType) -> tuple[Any, Any]:
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


def row_positions(
    path: Path, key_columns: Sequence[str], keys: pa.Table, deleted: BitMap64
) -> tuple[list[int], list[int]] | None:
    """The live rows of the file at ``path`` holding one of ``keys``: their positions and, for
    each, the row of ``keys`` it holds (None when none)."""
    return held_positions(pq.read_table(path, columns=list(key_columns)), keys, deleted)


def held_positions(
    held: pa.Table, keys: pa.Table, deleted: BitMap64
) -> tuple[list[int], list[int]] | None:
    """:func:`row_positions` of a file's rows read already (``held``: the columns of ``keys``
    but its last, :data:`MATCH`)."""
    key_columns = held.column_names
    held = held.append_column(ROW, pa.array(range(held.num_rows), pa.int64()))
    joined = held.join(keys, keys=list(key_columns), join_type="inner")
    if joined.num_rows == 0:
        return None
    pairs = sorted(
        (row, match)
        for row, match in zip(
            joined.column(ROW).to_pylist(), joined.column(MATCH).to_pylist(), strict=True
        )
        if row not in deleted
    )
    if not pairs:
        return None
    return [p[0] for p in pairs], [p[1] for p in pairs]


def change_feed_rows(
    target: pa.Schema,
    before: pa.Table,
    deleted_keys: set[int],
    updated: pa.Table,
    inserted: pa.Table,
) -> pa.Table:
    """The commit's Change Data Feed rows: old rows as ``delete`` or ``update_preimage``, new
    ones as ``update_postimage`` or ``insert``."""
    gone = pc.is_in(before.column(MATCH), pa.array(sorted(deleted_keys), pa.int64()))
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


def file_actions(
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
        size = write_parquet(written, table / name)
        actions.append(
            {
                "add": {
                    "path": name,
                    "partitionValues": {},
                    "size": size,
                    "modificationTime": now,
                    "dataChange": True,
                    "stats": json.dumps(statistics(written), separators=(",", ":")),
                }
            }
        )
        metrics.update(numTargetFilesAdded=1, numTargetBytesAdded=size)
    if feed.num_rows:
        name = f"_change_data/cdc-00000-{uuid.uuid4()}.c000.snappy.parquet"
        (table / "_change_data").mkdir(exist_ok=True)
        size = write_parquet(feed, table / name)
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


def conformed(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """A data file's rows with the table's columns and types (a column the file lacks: nulls)."""
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(len(rows))
        for f in target
    ]
    return pa.Table.from_arrays(
        [a if a.type == f.type else a.cast(f.type) for a, f in zip(arrays, target, strict=True)],
        schema=target,
    )


def write_parquet(rows: pa.Table, path: Path) -> int:
    pq.write_table(rows, path, compression="snappy")
    return path.stat().st_size


def statistics(rows: pa.Table) -> dict[str, Any]:
    """Delta's file statistics: row and null counts, and the minimum and maximum of the columns
    whose bounds are exact in JSON (integers, dates, strings: a longer one's first
    :data:`STRING_STATS_PREFIX` characters, the maximum's followed by a character above the
    first one cut off, as Spark's are)."""
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
            lo = lo[:STRING_STATS_PREFIX]
            if len(hi) > STRING_STATS_PREFIX:  # still an upper bound, as Spark's is
                cut = hi[STRING_STATS_PREFIX]
                hi = hi[:STRING_STATS_PREFIX] + (ASCII_MAX if cut < ASCII_MAX else MAX_CHARACTER)
        low[name], high[name] = lo, hi
    return {
        "numRecords": rows.num_rows,
        "minValues": low,
        "maxValues": high,
        "nullCount": nulls,
        "tightBounds": True,
    }
