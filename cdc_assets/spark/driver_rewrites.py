"""Rewriting a local Delta table's files from the driver, without Spark: what the writer's
compaction (:mod:`.compaction`) and the maintenance job's drop of retired partitions
(:mod:`.partition_drops`) share.

A file is read with its deletion vector applied (delta-rs 1.6 neither reads nor writes deletion
vectors: :mod:`.deletion_vectors` reads them), in the table's columns and types; rows are
written back as one Parquet file with Delta's statistics
(:func:`.deletion_vector_files.statistics`); and the commit (each old file removed with its
deletion vector, the new ones added) is made with the project's put-if-absent commit
(:func:`.deletion_vector_commits.commit_next`), which writes the checkpoint of a checkpoint
version and cleans up the expired log. A commit that lost its version to another writer makes
nothing: the caller reads the log again and plans anew.

Only tables whose protocol asks nothing of a writer that moves rows between files are written
here (:func:`rewritable`): no column mapping, row tracking, clustering, V2 checkpoints or
in-commit timestamps; Spark writes the others.
"""

from __future__ import annotations

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

from . import deletion_vectors, delta_log
from .deletion_vector_commits import (
    READER_FEATURES,
    WRITER_FEATURES,
    commit_info,
    commit_next,
)
from .deletion_vector_files import arrow_schema, conformed, statistics, write_parquet

log = logging.getLogger(__name__)


def rewritable(state: delta_log.TableLog) -> bool:
    """Whether rows may be moved between the table's files here: its protocol asks only for
    what :mod:`.deletion_vector_commits` writes (deletion vectors, Change Data Feed,
    timestamp_ntz, legacy features that constrain values, not files), without column mapping."""
    protocol, metadata = state.protocol, state.metadata
    configuration = metadata.get("configuration") or {}
    writer = int(protocol.get("minWriterVersion", 0))
    reader = int(protocol.get("minReaderVersion", 0))
    return (
        configuration.get("delta.columnMapping.mode", "none") == "none"
        and reader in (1, 3)
        and 2 <= writer <= 7
        and set(protocol.get("writerFeatures") or []) <= WRITER_FEATURES
        and set(protocol.get("readerFeatures") or []) <= READER_FEATURES
    )


def partition_columns(state: delta_log.TableLog) -> list[str]:
    return list(state.metadata.get("partitionColumns") or [])


def table_schema(state: delta_log.TableLog) -> pa.Schema:
    """The table's columns as Arrow types (partition columns included)."""
    return arrow_schema(state.metadata["schemaString"])


def deleted_rows(add: Mapping[str, Any]) -> int:
    """How many of the file's rows its deletion vector removes (its descriptor says)."""
    vector = add.get("deletionVector") or {}
    return int(vector.get("cardinality") or 0)


def file_stats(add: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(add.get("stats") or "{}")
    except ValueError:
        return {}


def file_rows(add: Mapping[str, Any]) -> int:
    """The file's rows by its statistics (0 when they do not say)."""
    return int(file_stats(add).get("numRecords") or 0)


def live_rows(table: Path, add: Mapping[str, Any], schema: pa.Schema) -> pa.Table:
    """The file's rows that its deletion vector leaves, in ``schema``'s columns and types
    (a partitioned table's partition values filled in from the file's action)."""
    rows = pq.read_table(table / unquote(add["path"]))
    for name, value in (add.get("partitionValues") or {}).items():
        if name in schema.names and name not in rows.column_names:
            kind = schema.field(name).type
            rows = rows.append_column(name, pa.array([value] * rows.num_rows, pa.string()))
            rows = rows.set_column(rows.num_columns - 1, name, rows.column(name).cast(kind))
    rows = conformed(rows, schema)
    deleted = deletion_vectors.read(table, add.get("deletionVector"))
    if deleted:
        positions = pa.array(range(rows.num_rows), pa.uint64())
        gone = pc.is_in(positions, value_set=pa.array(list(deleted), pa.uint64()))
        rows = rows.filter(pc.invert(gone))
    return rows


def add_action(table: Path, rows: pa.Table, *, data_change: bool) -> dict[str, Any]:
    """``rows`` written as a new data file of the (unpartitioned) table; its ``add`` action."""
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    size = write_parquet(rows, table / name)
    return {
        "add": {
            "path": name,
            "partitionValues": {},
            "size": size,
            "modificationTime": int(time.time() * 1000),
            "dataChange": data_change,
            "stats": json.dumps(statistics(rows), separators=(",", ":")),
        }
    }


def remove_action(add: Mapping[str, Any], *, data_change: bool) -> dict[str, Any]:
    """The ``remove`` of a live file (with its deletion vector: the file action's key)."""
    kept = {k: add[k] for k in ("path", "partitionValues", "size", "deletionVector") if k in add}
    return {
        "remove": {
            **kept,
            "deletionTimestamp": int(time.time() * 1000),
            "dataChange": data_change,
            "extendedFileMetadata": True,
        }
    }


def set_configuration(table: Path, wanted: Mapping[str, str], *, attempts: int = 10) -> bool | None:
    """Set the local table's properties ``wanted`` (``ALTER TABLE ... SET TBLPROPERTIES``, one
    metadata commit, no Spark job): True when committed, False when it has them already, None
    when the driver does not write this table (Spark's ``ALTER TABLE`` does). A commit that lost
    its version is made again on the new one, up to ``attempts`` times."""
    for _ in range(attempts):
        state = delta_log.read(table)
        if state is None or not rewritable(state):
            return None
        configuration = dict(state.metadata.get("configuration") or {})
        if all(configuration.get(k) == v for k, v in wanted.items()):
            return False
        metadata = {**state.metadata, "configuration": {**configuration, **wanted}}
        parameters = {"properties": json.dumps(dict(wanted))}
        info = commit_info(state, "SET TBLPROPERTIES", parameters, {}, blind_append=True)
        if commit_next(table, state, [info, {"metaData": metadata}]) is not None:
            return True
    raise RuntimeError(
        f"{table}: other writers committed {attempts} times while its properties were set"
    )


def commit_rewrite(
    table: Path,
    state: delta_log.TableLog,
    operation: str,
    parameters: Mapping[str, str],
    actions: Sequence[Mapping[str, Any]],
    metrics: Mapping[str, int],
) -> int | None:
    """Commit ``actions`` as ``operation`` on top of ``state``; the version, or None when another
    writer took it (the files ``actions`` add are deleted again: nothing refers to them)."""
    info = commit_info(state, operation, parameters, metrics)
    version = commit_next(table, state, [info, *actions])
    if version is None:
        for action in actions:
            if action.get("add"):
                (table / unquote(action["add"]["path"])).unlink(missing_ok=True)
        log.info("%s: version %d was committed by another writer first", table, state.version + 1)
    return version
