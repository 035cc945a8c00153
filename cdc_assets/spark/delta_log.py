"""A local Delta table's log read and written without Spark or delta-rs: the files that make its
current version, with their deletion vectors, and a new commit put next to them.

delta-rs 1.6 opens a table with deletion vectors but neither says which file has which vector
nor writes to it, so :mod:`.merge_with_deletion_vectors` reads the log itself: the newest
checkpoint named by ``_last_checkpoint`` (one Parquet file; a multi-part or V2 checkpoint is not
read here, the caller leaves such a table to Spark), then each commit after it, in order, until
the first version that does not exist. A file action's key is its path and its deletion vector's
id (the protocol's primary key): a MERGE that adds a vector to a file removes the file with its
old vector and adds it again with the new one in the same commit.

A commit is written as a hidden temporary file, then linked to ``<version>.json``: the link
fails when the version exists, so of two writers of the same version exactly one wins, and a
reader never sees half a commit (the local file system's put-if-absent, as Delta's own log store
for local paths provides it).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from . import deletion_vectors

FileKey = tuple[str, str | None]


@dataclass
class TableLog:
    """A table's state at ``version``: its protocol, metadata and live data files."""

    version: int
    protocol: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    files: dict[FileKey, dict[str, Any]] = field(default_factory=dict)
    # the files removed (tombstones: the log's, the checkpoint's), when read with them
    removed: dict[FileKey, dict[str, Any]] | None = None

    def apply(self, action: Mapping[str, Any]) -> None:
        if action.get("add"):
            add = action["add"]
            self.files[(add["path"], deletion_vectors.unique_id(add.get("deletionVector")))] = add
        elif action.get("remove"):
            remove = action["remove"]
            key = (remove["path"], deletion_vectors.unique_id(remove.get("deletionVector")))
            self.files.pop(key, None)
            if self.removed is not None:
                self.removed[key] = remove
        elif action.get("metaData"):
            self.metadata = action["metaData"]
        elif action.get("protocol"):
            self.protocol = action["protocol"]


def log_folder(table: Path) -> Path:
    return table / "_delta_log"


def commit_file(table: Path, version: int) -> Path:
    return log_folder(table) / f"{version:020d}.json"


def read(table: Path, until: int | None = None, *, tombstones: bool = False) -> TableLog | None:
    """The table's current state (at version ``until`` when given), None when this module
    cannot read its log (a multi-part or V2 checkpoint, a log that does not start where it
    should, a checkpoint newer than ``until``). ``tombstones``: with the files removed (those
    the checkpoint keeps, and every remove after it)."""
    start = _checkpoint(table, tombstones)
    if start is None or (until is not None and start.version > until):
        return None
    state = start
    version = state.version + 1
    while until is None or version <= until:
        try:
            text = commit_file(table, version).read_text()
        except FileNotFoundError:
            break
        for line in text.splitlines():
            if line.strip():
                state.apply(json.loads(line))
        state.version = version
        version += 1
    return state if state.version >= 0 and state.protocol and state.metadata else None


def latest_version(table: Path) -> int | None:
    """The table's newest version (the checkpoint ``_last_checkpoint`` names, then the commits
    after it), without reading any commit; None without a log."""
    try:
        pointer = _last_checkpoint(table)
        version = int(pointer["version"]) if pointer is not None else -1
    except (ValueError, KeyError):
        version = -1
    while commit_file(table, version + 1).exists():
        version += 1
    return version if version >= 0 else None


def _last_checkpoint(table: Path) -> dict[str, Any] | None:
    """The ``_last_checkpoint`` pointer, None without one."""
    try:
        return json.loads((log_folder(table) / "_last_checkpoint").read_text())
    except FileNotFoundError:
        return None


def _checkpoint(table: Path, tombstones: bool) -> TableLog | None:
    """The state at the checkpoint ``_last_checkpoint`` names (version -1, empty, without one)."""
    pointer = _last_checkpoint(table)
    removed: dict[FileKey, dict[str, Any]] | None = {} if tombstones else None
    if pointer is None:
        return TableLog(-1, removed=removed) if commit_file(table, 0).exists() else None
    if pointer.get("parts") or pointer.get("v2Checkpoint"):
        return None
    version = int(pointer["version"])
    path = log_folder(table) / f"{version:020d}.checkpoint.parquet"
    if not path.exists():
        return None
    state = TableLog(version, removed=removed)
    columns = ("protocol", "metaData", "add", *(("remove",) if tombstones else ()))
    wanted = [c for c in columns if c in pq.read_schema(path).names]
    for row in pq.read_table(path, columns=wanted).to_pylist():
        state.apply({k: _plain(v) for k, v in row.items() if v is not None})
    return state


# The checkpoint's map fields (lists of pairs in Arrow; an empty one is an empty list)
_MAPS = frozenset({"configuration", "options", "partitionValues", "tags"})


def _plain(value: Any, name: str | None = None) -> Any:
    """A checkpoint's struct as the JSON log has it: maps (lists of pairs in Arrow) as dicts,
    lists (``partitionColumns``) as lists, null fields left out."""
    if isinstance(value, dict):
        return {k: _plain(v, k) for k, v in value.items() if v is not None}
    if isinstance(value, list) and name in _MAPS:
        return dict(value)
    return value


def commit(table: Path, version: int, actions: Sequence[Mapping[str, Any]]) -> bool:
    """Write ``actions`` as the table's ``version``; False (nothing written) when that version
    exists already: another writer committed first."""
    text = "\n".join(json.dumps(a, separators=(",", ":")) for a in actions)
    return _put_if_absent(commit_file(table, version), text)


def write_checksum(table: Path) -> int | None:
    """Write the version checksum (``<version>.crc``) of the table's current version when it
    has none (delta-rs and :func:`commit` write none; Spark does): Delta then reads the
    version's protocol and metadata from it, where it would otherwise replay the log in a Spark
    job just to learn the table's schema. Only the fields a reader needs and that this state
    gives exactly (Delta's others are optional). The version, None when the log is not read
    here."""
    state = read(table)
    if state is None:
        return None
    checksum = {
        "tableSizeBytes": sum(int(add["size"]) for add in state.files.values()),
        "numFiles": len(state.files),
        "numMetadata": 1,
        "numProtocol": 1,
        "metadata": state.metadata,
        "protocol": state.protocol,
    }
    path = log_folder(table) / f"{state.version:020d}.crc"
    if not path.exists():
        _put_if_absent(path, json.dumps(checksum, separators=(",", ":")))
    return state.version


def _put_if_absent(path: Path, text: str) -> bool:
    """Write ``text`` as ``path`` whole or not at all; False when ``path`` exists already."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "x") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        return False
    finally:
        temporary.unlink(missing_ok=True)
