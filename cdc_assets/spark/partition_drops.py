"""Dropping whole partitions of a local change log from the driver: what the maintenance job
does with the ranges the sync retired (``maintenance.drop_retired_changes``).

A change log's partitions share files (:mod:`.partition_rows`): a file whose statistics say it
may hold one of the partitions is read (its partition column), removed when every row of it is
to go, and otherwise written again without those rows; one ``DELETE`` commit removes and adds
them. The commit is the project's put-if-absent one (:mod:`.driver_rewrites`): when another
writer (a range run's write or compaction) took the version, the drop is planned again on the
new one, so it never fails because the sync committed beside it, and it costs no Spark job. A
change log of the old layout (a folder per partition) loses its partitions' files outright.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import delta_log
from .driver_rewrites import (
    add_action,
    commit_rewrite,
    file_rows,
    file_stats,
    live_rows,
    partition_columns,
    remove_action,
    rewritable,
    table_schema,
)
from .partition_rows import PARTITION_COLUMN

ATTEMPTS = 10  # planned again this many times while other writers take the version


def drop_in_driver(table: Path, keys: Sequence[str]) -> int | None:
    """Delete every row of the partitions ``keys`` from the local change log at ``table``; the
    version committed (the current one when none of them has rows), or None when the driver
    does not write this table (Spark's ``DELETE`` does)."""
    wanted = set(keys)
    for _ in range(ATTEMPTS):
        state = delta_log.read(table)
        if state is None or not rewritable(state):
            return None
        if partition_columns(state) not in ([], [PARTITION_COLUMN]):
            return None
        actions: list[dict[str, Any]] = []
        deleted = copied = 0
        schema = table_schema(state)
        for add in list(state.files.values()):
            held = _partitions_held(table, add, wanted)
            if not held & wanted:
                continue
            actions.append(remove_action(add, data_change=True))
            if held <= wanted:
                deleted += file_rows(add)
                continue
            rows = live_rows(table, add, schema)
            gone = pc.is_in(
                rows.column(PARTITION_COLUMN), value_set=pa.array(sorted(wanted), pa.string())
            )
            kept = rows.filter(pc.invert(gone))
            deleted += rows.num_rows - kept.num_rows
            copied += kept.num_rows
            actions.append(add_action(table, kept, data_change=True))
        if not actions:
            return state.version
        removed = sum(1 for a in actions if a.get("remove"))
        metrics = {
            "numRemovedFiles": removed,
            "numAddedFiles": len(actions) - removed,
            "numDeletedRows": deleted,
            "numCopiedRows": copied,
        }
        predicate = f"{PARTITION_COLUMN} IN ({', '.join(repr(k) for k in sorted(wanted))})"
        parameters = {"predicate": json.dumps([predicate])}
        version = commit_rewrite(table, state, "DELETE", parameters, actions, metrics)
        if version is not None:
            return version
    raise RuntimeError(
        f"{table}: other writers committed {ATTEMPTS} times while retired partitions were dropped"
    )


def _partitions_held(table: Path, add: dict[str, Any], wanted: set[str]) -> set[str]:
    """The partitions the file holds rows of: its folder's in the old layout; else, when its
    statistics say it may hold one of ``wanted``, those its partition column has."""
    value = (add.get("partitionValues") or {}).get(PARTITION_COLUMN)
    if value is not None:
        return {value}
    stats = file_stats(add)
    low = (stats.get("minValues") or {}).get(PARTITION_COLUMN)
    high = (stats.get("maxValues") or {}).get(PARTITION_COLUMN)
    if low is not None and high is not None and not any(low <= k <= high for k in wanted):
        return set()
    column = pq.read_table(table / unquote(add["path"]), columns=[PARTITION_COLUMN])
    return set(column.column(PARTITION_COLUMN).unique().to_pylist())
