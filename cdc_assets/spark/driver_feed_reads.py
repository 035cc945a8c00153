"""A mirror's (or history's) change data feed and some of its rows, read in the driver: no Spark
job, for an incremental reader whose changes are few (:mod:`.change_feed`).

Spark's ``readChangeFeed`` and a filtered read of a table each cost a Spark job and a log
replay, seconds on a few cores, whatever the size of what they read; a change of one row then
costs a downstream asset as much as reading much of the table. On a local file system these
read the table's log (:mod:`.delta_log`) and its Parquet files with pyarrow instead:

- :func:`feed_rows`: per version, the commit's ``_change_data`` files (rows with their
  ``_change_type``, as Spark's MERGE and the driver's merges write them), or, for a commit
  without any, the files it added (inserts; a commit that removed files without change data
  is not read here: :mod:`.change_feed` reads the whole table then); a commit whose file
  actions all have ``dataChange=false`` (a compaction) has no change;
- :func:`rows_of_days`: the live rows of the files whose statistics can hold a timestamp
  column's value on one of some days (a table clustered by an increasing key holds a day in
  few files), deletion vectors applied.

Both return None where Spark must read: another store, a log this module does not read (a
checkpoint it cannot read, or newer than the version asked), a partitioned table or one with
column mapping, or more than :data:`DRIVER_READ_ROWS` rows (:data:`DRIVER_FEED_BYTES` of change
files). Columns come back as the source has them (:mod:`.stored_columns`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import types as T

from . import deletion_vectors, delta_log
from .deletion_vector_files import record_count
from .delta_location import is_local, local_path
from .stored_columns import decode_rows, stored_name

DRIVER_READ_ROWS = 2_000_000  # rows of live files read in the driver at most
DRIVER_FEED_BYTES = 64 << 20  # bytes of change files read in the driver at most
CHANGE_TYPE = "_change_type"


def feed_rows(
    uri: str, after: int, to: int, columns: Sequence[str]
) -> tuple[pa.Table, dict[int, int]] | None:
    """The feed's rows of versions ``(after, to]``: ``columns`` (source names) and
    ``_change_type``, with the version of each (``_commit_version``); and the commit timestamp
    (ms) of each version. None where Spark must read (module docstring)."""
    if not is_local(uri):
        return None
    table = local_path(uri)
    found = _stored(table, to, columns)
    if found is None:
        return None
    stored, names = found
    parts: list[pa.Table] = []
    timestamps: dict[int, int] = {}
    read_bytes = 0
    for version in range(after + 1, to + 1):
        try:
            text = delta_log.commit_file(table, version).read_text()
        except FileNotFoundError:
            return None
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        timestamps[version] = int(info.get("timestamp") or 0)
        cdc = [a["cdc"] for a in actions if "cdc" in a]
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        removes = [a for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        if not cdc and removes:
            return None  # a rewrite without change data: not a feed (change_feed reads whole)
        for action in cdc or adds:
            read_bytes += int(action.get("size") or 0)
            if read_bytes > DRIVER_FEED_BYTES:
                return None
            path = table / unquote(action["path"])
            wanted = [*names, CHANGE_TYPE] if cdc else names
            rows = pq.read_table(path, columns=wanted)
            if not cdc:
                rows = _live(table, action, rows)
                rows = rows.append_column(CHANGE_TYPE, pa.array(["insert"] * len(rows)))
            rows = rows.append_column(
                "_commit_version", pa.array([version] * len(rows), pa.int64())
            )
            parts.append(rows)
    empty = pa.schema([*_arrow_fields(stored), pa.field(CHANGE_TYPE, pa.string())])
    empty = empty.append(pa.field("_commit_version", pa.int64()))
    every = pa.concat_tables([p.cast(empty) for p in parts] if parts else [empty.empty_table()])
    decoded = decode_rows(stored, every.select(names))
    for name in (CHANGE_TYPE, "_commit_version"):
        decoded = decoded.append_column(name, every.column(name))
    return decoded, timestamps


def rows_of_days(
    uri: str, version: int, columns: Sequence[str], day_column: str, days: Sequence[dt.date | None]
) -> pa.Table | None:
    """The live rows of the table at ``version`` (``columns``, source names) whose
    ``day_column`` (a timestamp) falls on one of ``days`` (None: the rows where it is null).
    None where Spark must read (module docstring)."""
    if not is_local(uri):
        return None
    table = local_path(uri)
    state = delta_log.read(table, until=version)
    if state is None or state.version != version or not _plain(state.metadata):
        return None
    found = _stored(table, version, columns, state)
    if found is None:
        return None
    stored, names = found
    column = stored_name(day_column)
    wanted = {d for d in days if d is not None}
    nulls = any(d is None for d in days)
    candidates = [a for a in state.files.values() if _may_hold(a, column, wanted, nulls)]
    if sum(record_count(a) for a in candidates) > DRIVER_READ_ROWS:
        return None
    parts = []
    for add in candidates:
        rows = _live(table, add, pq.read_table(table / unquote(add["path"]), columns=names))
        parts.append(rows.cast(pa.schema(_arrow_fields(stored))))
    rows = pa.concat_tables(parts) if parts else pa.schema(_arrow_fields(stored)).empty_table()
    day = pc.cast(rows.column(column), pa.date32())
    keep = pc.is_in(day, value_set=pa.array(sorted(wanted), pa.date32()))
    if nulls:
        keep = pc.or_kleene(keep, pc.is_null(day))
    return decode_rows(stored, rows.filter(pc.fill_null(keep, False)))


def _stored(
    table: Path, version: int, columns: Sequence[str], state: delta_log.TableLog | None = None
) -> tuple[T.StructType, list[str]] | None:
    """The stored schema of ``columns`` (source names) and their stored names; None when the
    table's log is not read here or it is partitioned or maps column names."""
    state = state or delta_log.read(table, until=version)
    if state is None or not _plain(state.metadata):
        return None
    schema = T.StructType.fromJson(json.loads(state.metadata["schemaString"]))
    by_name = {(f.metadata or {}).get("cdc_assets.name", f.name): f for f in schema.fields}
    if any(c not in by_name for c in columns):
        return None
    fields = [by_name[c] for c in columns]
    return T.StructType(fields), [f.name for f in fields]


def _plain(metadata: Mapping[str, Any]) -> bool:
    """Not partitioned, no column mapping: data files hold the columns by their names."""
    configuration = metadata.get("configuration") or {}
    mapped = configuration.get("delta.columnMapping.mode", "none") != "none"
    return not metadata.get("partitionColumns") and not mapped


def _arrow_fields(stored: T.StructType) -> list[pa.Field]:
    from deltalake import Schema

    schema = pa.schema(Schema.from_json(stored.json()).to_arrow())
    return list(schema)


def _live(table: Path, add: Mapping[str, Any], rows: pa.Table) -> pa.Table:
    """``rows`` (a data file's, in order) without those its deletion vector deletes."""
    deleted = deletion_vectors.read(table, add.get("deletionVector"))
    if not deleted:
        return rows
    mask = pc.invert(
        pc.is_in(pa.array(range(len(rows)), pa.int64()), pa.array(deleted, pa.int64()))
    )
    return rows.filter(mask)


def _may_hold(add: Mapping[str, Any], column: str, days: set[dt.date], nulls: bool) -> bool:
    """The file's statistics allow a value of ``column`` on one of ``days`` (or a null)."""
    try:
        stats = json.loads(add.get("stats") or "{}")
        if nulls and int(stats["nullCount"][column]) > 0:
            return True
        low = dt.date.fromisoformat(str(stats["minValues"][column])[:10])
        high = dt.date.fromisoformat(str(stats["maxValues"][column])[:10])
    except (KeyError, TypeError, ValueError):
        return True
    return any(low <= d <= high for d in days)
