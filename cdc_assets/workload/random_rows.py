"""New rows, free keys, changed values and the table to work on, drawn from the workload's seed.

:class:`RowChoices` adds to a :class:`~.table_model.TableModel` the random choices a transaction
makes: a new row with a free key (integer keys count up, a child's per parent), new values for a
few non-key columns, a table picked by weight. All draws come from one ``random.Random`` and the
model is iterated in insertion order only, so the same seed gives the same choices.
"""

from __future__ import annotations

from collections.abc import Sequence
from random import Random
from typing import Any

from .demo_schema import INTEGER_RANGES, ColumnDef
from .random_values import generate_value
from .table_model import Key, Row, TableModel, TableState, WorkloadError

__all__ = ["RowChoices"]


class RowChoices(TableModel):
    """A table model with the random choices of new rows, keys, changes and tables."""

    rng: Random

    def _fresh_key_value(
        self, state: TableState, name: str, parent_key: Key | None, pending: Sequence[Row] = ()
    ) -> Any:
        """A new value for key column ``name``: integers count up (child keys per parent)."""
        column = state.table.column(name)
        if column.base_type in INTEGER_RANGES:
            if state.parent_idx and parent_key is not None:
                i = state.table.column_index[name]
                siblings = state.children.get(parent_key, {})
                used = [state.rows[k][0][i] for k in siblings]
                used += [r[i] for r in pending if state.parent_key(r) == parent_key]
                return 1 + max(used, default=0)
            value = state.next_int
            state.next_int += 1
            return value
        return generate_value(self.rng, column, allow_null=False)

    def _new_row(
        self, state: TableState, parent_key: Key | None = None, pending: Sequence[Row] = ()
    ) -> Row:
        """A new row with a free key (``pending``: rows about to be inserted with it)."""
        table = state.table
        taken = {state.key_of(r) for r in pending} if table.has_key else set()
        for _ in range(100):
            values = [self._column_value(c) for c in table.columns]
            if parent_key is not None:
                for i, value in zip(state.parent_idx, parent_key, strict=True):
                    values[i] = value
            for name in state.own_key:
                values[table.column_index[name]] = self._fresh_key_value(
                    state, name, parent_key, pending
                )
            row = tuple(values)
            key = state.key_of(row)
            if not table.has_key or (key not in state.rows and key not in taken):
                return row
        raise WorkloadError(f"could not find a free key for {table.full_name}")

    def _new_children(
        self, child: TableState, parent_keys: Sequence[Key], pending: Sequence[Row] = ()
    ) -> list[Row]:
        """One new child row per entry of ``parent_keys`` (line numbers continue per parent)."""
        rows: list[Row] = list(pending)
        for parent_key in parent_keys:
            rows.append(self._new_row(child, parent_key, rows))
        return rows[len(pending) :]

    def _column_value(self, column: ColumnDef, *, allow_null: bool = True) -> Any:
        hint = column.hint or ""
        if hint.startswith("ref:"):
            target = self._states.get(hint[4:])
            if target is not None and target.keys:
                return target.keys.choice(self.rng)[0]
        return generate_value(self.rng, column, allow_null=allow_null)

    def _changes(self, state: TableState) -> dict[str, Any]:
        """New values for 1-3 random non-key columns (never the parent link)."""
        table = state.table
        fixed = set(table.locator)
        if table.parent is not None:
            fixed |= {child for child, _ in table.parent.columns}
        candidates = [c for c in table.columns if c.name not in fixed]
        picked = self.rng.sample(candidates, k=min(len(candidates), self.rng.randint(1, 3)))
        picked.sort(key=lambda c: table.column_index[c.name])
        return {c.name: self._column_value(c) for c in picked}

    def _pick_state(
        self, *, keyed: bool = False, nonempty: bool = False, top_level: bool = False
    ) -> TableState | None:
        states = [
            s
            for s in self._states.values()
            if (not keyed or s.table.has_key)
            and (not nonempty or s.keys)
            and (not top_level or not s.parent_idx)
        ]
        if not states:
            return None
        return self.rng.choices(states, weights=[s.table.weight for s in states])[0]
