"""What every table of a workload must contain: rows by key, in the Python types pyodbc returns.

:class:`TableModel` keeps, per table, its rows by locator key, its keys (for uniform random
choice) and, on a child table, its keys by parent key. Changes made inside a transaction are
journaled, so a rollback (or an error) restores the model. :func:`read_rows` reads a table's
contents from the database; :meth:`TableModel.verify` compares the two.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

from cdc_assets.sqlserver.quoting import quote_name

from .demo_schema import INTEGER_RANGES, TableDef

__all__ = ["Key", "Row", "TableModel", "TableState", "WorkloadError", "parents_first", "read_rows"]

Row = tuple[Any, ...]
Key = tuple[Any, ...]


class WorkloadError(RuntimeError):
    """The database did something the model did not expect (e.g. a wrong row count)."""


class KeySet:
    """Keys with O(1) add, remove and uniform random choice (deterministic order)."""

    def __init__(self) -> None:
        self._items: list[Key] = []
        self._index: dict[Key, int] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def add(self, key: Key) -> None:
        if key not in self._index:
            self._index[key] = len(self._items)
            self._items.append(key)

    def remove(self, key: Key) -> None:
        position = self._index.pop(key)
        last = self._items.pop()
        if position < len(self._items):
            self._items[position] = last
            self._index[last] = position

    def choice(self, rng: Random) -> Key:
        return self._items[rng.randrange(len(self._items))]


@dataclass
class TableState:
    table: TableDef
    rows: dict[Key, list[Row]] = field(default_factory=dict)
    keys: KeySet = field(default_factory=KeySet)
    children: dict[Key, dict[Key, None]] = field(default_factory=dict)  # on a child: by parent
    next_int: int = 1
    locator_idx: tuple[int, ...] = ()
    parent_idx: tuple[int, ...] = ()
    own_key: tuple[str, ...] = ()

    def parent_key(self, row: Row) -> Key:
        return tuple(row[i] for i in self.parent_idx)

    def key_of(self, row: Row) -> Key:
        return tuple(row[i] for i in self.locator_idx)


def read_rows(conn: Any, table: TableDef) -> list[Row]:
    """All rows of ``table`` as tuples in column order, ordered by the locator columns."""
    columns = ", ".join(c.quoted for c in table.columns)
    order = ", ".join(quote_name(c) for c in table.locator)
    cursor = conn.cursor()
    try:
        cursor.execute(f"SELECT {columns} FROM {table.quoted} ORDER BY {order}")
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        cursor.close()


def parents_first(tables: Sequence[TableDef]) -> list[TableDef]:
    """Parents before children."""
    done: list[TableDef] = []
    pending = list(tables)
    while pending:
        names = {t.full_name for t in done}
        ready = [t for t in pending if t.parent is None or t.parent.table in names]
        if not ready:
            ready = pending[:1]  # a parent outside the set: treat as independent
        for table in ready:
            pending.remove(table)
            done.append(table)
    return done


class TableModel:
    """The rows every table of ``tables`` must hold, parents before children.

    ``max_rows`` (None: no limit) marks a table holding more rows as over-full.
    """

    conn: Any
    max_rows: int | None

    def __init__(self, tables: Sequence[TableDef]) -> None:
        self.tables = tuple(parents_first(tables))
        self._journal: list[tuple[TableState, Key, list[Row] | None]] | None = None
        self._states: dict[str, TableState] = {}
        for table in self.tables:
            self._states[table.full_name] = self._new_state(table)
        self._children: dict[str, list[TableState]] = {}
        for state in self._states.values():
            parent = state.table.parent
            if parent is not None and parent.table in self._states:
                self._children.setdefault(parent.table, []).append(state)

    def _load(self, conn: Any) -> None:
        """Start from the tables' current contents."""
        for state in self._states.values():
            for row in read_rows(conn, state.table):
                self._put_rows(
                    state, state.key_of(row), [*state.rows.get(state.key_of(row), []), row]
                )
            self._init_counter(state)

    def _new_state(self, table: TableDef) -> TableState:
        index = table.column_index
        parent_idx: tuple[int, ...] = ()
        parent_cols: set[str] = set()
        if table.parent is not None:
            parent_idx = tuple(index[child] for child, _ in table.parent.columns)
            parent_cols = {child for child, _ in table.parent.columns}
        return TableState(
            table=table,
            locator_idx=tuple(index[c] for c in table.locator),
            parent_idx=parent_idx,
            own_key=tuple(c for c in table.locator if c not in parent_cols),
        )

    def _init_counter(self, state: TableState) -> None:
        highest = 0
        for name in state.own_key:
            column = state.table.column(name)
            if column.base_type in INTEGER_RANGES:
                i = state.table.column_index[name]
                for rows in state.rows.values():
                    highest = max(highest, int(rows[0][i]))
        state.next_int = highest + 1

    def _put_rows(self, state: TableState, key: Key, rows: list[Row] | None) -> None:
        """Set the rows at ``key`` (None or [] removes it); journaled inside a transaction."""
        old = state.rows.get(key)
        if self._journal is not None:
            self._journal.append((state, key, None if old is None else list(old)))
        self._apply(state, key, rows or None, old)

    def _apply(
        self, state: TableState, key: Key, rows: list[Row] | None, old: list[Row] | None
    ) -> None:
        if rows:
            state.rows[key] = rows
            state.keys.add(key)
            if state.parent_idx:
                state.children.setdefault(state.parent_key(rows[0]), {})[key] = None
        elif old is not None:
            del state.rows[key]
            state.keys.remove(key)
            if state.parent_idx:
                parent = state.parent_key(old[0])
                siblings = state.children.get(parent)
                if siblings is not None:
                    siblings.pop(key, None)
                    if not siblings:
                        del state.children[parent]

    def _undo(self) -> None:
        journal = self._journal or []
        self._journal = None
        for state, key, old in reversed(journal):
            self._apply(state, key, old, state.rows.get(key))

    def expected_rows(self, table: TableDef | str) -> list[Row]:
        """What ``table`` must contain now (committed work), in model order."""
        name = table.full_name if isinstance(table, TableDef) else table
        return [row for rows in self._states[name].rows.values() for row in rows]

    def row_count(self, table: TableDef | str) -> int:
        return len(self.expected_rows(table))

    def verify(self, conn: Any = None) -> dict[str, list[str]]:
        """Compare every table with the model; returns the differences (empty dict: equal)."""
        conn = self.conn if conn is None else conn
        problems: dict[str, list[str]] = {}
        for state in self._states.values():
            actual = Counter(read_rows(conn, state.table))
            expected = Counter(self.expected_rows(state.table))
            if actual == expected:
                continue
            missing = list((expected - actual).elements())[:5]
            extra = list((actual - expected).elements())[:5]
            lines = [
                f"{sum(actual.values())} rows in the source, {sum(expected.values())} expected"
            ]
            lines += [f"missing: {row!r}" for row in missing]
            lines += [f"unexpected: {row!r}" for row in extra]
            problems[state.table.full_name] = lines
        return problems

    def _parent_of(self, child: TableState) -> TableState | None:
        assert child.table.parent is not None
        return self._states.get(child.table.parent.table)

    def _over_full(self) -> TableState | None:
        """The fullest table holding more than ``max_rows`` rows, if any."""
        limit = self.max_rows
        if limit is None:
            return None
        counts = [(sum(len(r) for r in s.rows.values()), s) for s in self._states.values()]
        full = [(n, s) for n, s in counts if n > limit and s.keys]
        return max(full, key=lambda item: item[0])[1] if full else None
