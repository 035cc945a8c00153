"""Plain-Python replay of CDC change rows onto a snapshot: the reference the real code must match.

Rows are applied in the order SQL Server defines (``__$start_lsn``, ``__$command_id``,
``__$seqval``, ``__$operation``). Keyed tables: delete (1) removes the key, insert (2) and update
after-image (4) set it, the before image (3) is only checked. Keyless tables are multisets: 1 and 3
remove one equal row, 2 and 4 add one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

Row = tuple[Any, ...]

DELETE, INSERT, BEFORE, AFTER = 1, 2, 3, 4


def change_order(change: dict[str, Any]) -> tuple[bytes, int, bytes, int]:
    return (
        change["__$start_lsn"],
        change["__$command_id"],
        change["__$seqval"],
        change["__$operation"],
    )


def replay_keyed(
    snapshot: Iterable[Row],
    changes: Iterable[dict[str, Any]],
    columns: Sequence[str],
    key_columns: Sequence[str],
) -> dict[Row, Row]:
    """Apply ``changes`` (dicts with the metadata columns and ``columns``) to a keyed snapshot."""
    key_idx = [columns.index(k) for k in key_columns]
    state = {tuple(row[i] for i in key_idx): tuple(row) for row in snapshot}
    for change in sorted(changes, key=change_order):
        row = tuple(change[c] for c in columns)
        key = tuple(row[i] for i in key_idx)
        op = change["__$operation"]
        if op == DELETE:
            if key not in state:
                raise AssertionError(f"delete of a key that is not there: {key}")
            del state[key]
        elif op == INSERT:
            if key in state:
                raise AssertionError(f"insert of a key that is already there: {key}")
            state[key] = row
        elif op == BEFORE:
            if state.get(key) != row:
                raise AssertionError(f"before image {row} does not match {state.get(key)}")
        elif op == AFTER:
            state[key] = row
        else:
            raise AssertionError(f"unknown __$operation {op}")
    return state


def replay_multiset(
    snapshot: Iterable[Row], changes: Iterable[dict[str, Any]], columns: Sequence[str]
) -> Counter[Row]:
    """Apply ``changes`` to a keyless table, mirrored as a multiset of rows."""
    state: Counter[Row] = Counter(tuple(row) for row in snapshot)
    for change in sorted(changes, key=change_order):
        row = tuple(change[c] for c in columns)
        if change["__$operation"] in (DELETE, BEFORE):
            if state[row] == 0:
                raise AssertionError(f"removal of a row that is not there: {row}")
            state[row] -= 1
            if state[row] == 0:
                del state[row]
        else:
            state[row] += 1
    return state


def replay_keyed_idempotent(
    snapshot: Iterable[Row],
    changes: Iterable[dict[str, Any]],
    columns: Sequence[str],
    key_columns: Sequence[str],
) -> dict[Row, Row]:
    """The fuzzy-snapshot rule (DESIGN.md section 3): the snapshot may already contain some of the
    changes, so inserts and after images upsert and deletes remove the key if it is there."""
    key_idx = [columns.index(k) for k in key_columns]
    state = {tuple(row[i] for i in key_idx): tuple(row) for row in snapshot}
    for change in sorted(changes, key=change_order):
        row = tuple(change[c] for c in columns)
        key = tuple(row[i] for i in key_idx)
        if change["__$operation"] == DELETE:
            state.pop(key, None)
        elif change["__$operation"] in (INSERT, AFTER):
            state[key] = row
    return state
