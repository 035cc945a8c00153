"""VACUUM of a local Delta table from the driver: the files no version within the history kept
uses, deleted without a Spark job, and with the history as given, not rounded up to hours.

What Delta's ``VACUUM`` deletes, as its protocol defines it: every file under the table's
folder (data files, the change data feed's under ``_change_data``, deletion vector files) that
neither the current version uses (a live file and its deletion vector) nor a version within the
history may use (a file removed less than the history ago: its tombstone's
``deletionTimestamp``), and that is older than the history itself (a file a writer is still
committing is new). The log, hidden files and folders (``_`` or ``.`` first, but ``_change_data``
and partition folders, ``<column>=<value>``) are left alone, as Delta's ``VACUUM`` leaves them;
unlike Delta's, a column's partition folders are looked into also when the table is no longer
partitioned by it (a change log rewritten from the old layout: its old files go too).

Spark's ``VACUUM ... RETAIN n HOURS`` counts whole hours (0.17 hours is 0: every earlier version's
files would go), so a history of 10 minutes kept its files an hour; and it costs a listing job and
a commit pair (``VACUUM START``/``END``) a table. Here the history is kept as configured, and a
table costs a read of its log and a listing of its folder (the local file system's: this is the
local fast path; other storage is Spark's).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from . import deletion_vectors, delta_log

CHANGE_DATA = "_change_data"


def vacuum_in_driver(table: Path, history_seconds: float) -> int | None:
    """Delete the table's files that no version of the last ``history_seconds`` uses (module
    doc); how many were deleted, None when its log is not one this module reads (Spark's
    ``VACUUM`` does it)."""
    state = delta_log.read(table, tombstones=True)
    if state is None or state.removed is None:
        return None
    cutoff = time.time() - max(history_seconds, 0.0)
    used: set[Path] = set()
    for add in state.files.values():
        used |= _paths(table, add)
    for remove in state.removed.values():
        if int(remove.get("deletionTimestamp") or 0) / 1000 > cutoff:
            used |= _paths(table, remove)
    # a column's partition folders: the table's partition columns', and those of a column that
    # partitioned it before (a change log rewritten from the old layout leaves its folders)
    columns = [
        f["name"] for f in json.loads(state.metadata.get("schemaString") or "{}").get("fields", [])
    ]
    deleted = 0
    for path in _candidates(table, columns):
        if path in used:
            continue
        try:
            if path.stat().st_mtime >= cutoff:
                continue  # new: a writer may be committing it
            path.unlink()
        except FileNotFoundError:
            continue
        deleted += 1
        path.with_name(f".{path.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum of it
    return deleted


def _paths(table: Path, action: Mapping[str, Any]) -> set[Path]:
    """The data file an add or remove names, and its deletion vector's file (if it has one)."""
    text = unquote(action["path"])
    path = Path(text.removeprefix("file:")) if text.startswith(("/", "file:")) else table / text
    found = {path}
    vector = action.get("deletionVector")
    if vector and vector.get("storageType") == "u":
        found.add(deletion_vectors.vector_file(table, vector["pathOrInlineDv"]))
    elif vector and vector.get("storageType") == "p":
        found.add(Path(unquote(vector["pathOrInlineDv"].removeprefix("file:"))))
    return found


def _candidates(table: Path, partitions: list[str]) -> Iterator[Path]:
    """The files under ``table`` that VACUUM may delete (module doc)."""
    for folder, subfolders, files in os.walk(table):
        subfolders[:] = [d for d in subfolders if not _hidden(d, partitions)]
        for name in files:
            if not name.startswith((".", "_")):
                yield Path(folder) / name


def _hidden(name: str, partitions: list[str]) -> bool:
    if name == CHANGE_DATA or any(name.startswith(f"{p}=") for p in partitions):
        return False
    return name.startswith((".", "_"))
