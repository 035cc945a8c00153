"""The kinds of transaction a workload runs, each the statements of one realistic change.

Multi-row inserts, an order with its lines, updates of non-key columns, deletes, primary-key
updates cascaded to child rows, delete + re-insert of one key, insert/update/delete of one row,
several of these mixed, a rare burst (one large transaction) and the trim that keeps a table
near its size limit. :data:`TRANSACTION_KINDS` weighs the ones :meth:`Workload.step` draws.
"""

from __future__ import annotations

from collections.abc import Callable

from .modelled_writes import ModelledWrites
from .random_rows import RowChoices
from .table_model import Row

__all__ = ["TRANSACTION_KINDS", "TransactionKinds"]


# The kinds of transaction :meth:`Workload.step` draws, with their relative weights.
TRANSACTION_KINDS: tuple[tuple[str, float], ...] = (
    ("insert", 20),
    ("order", 14),
    ("update", 22),
    ("delete", 7),
    ("key_update", 5),
    ("delete_reinsert", 5),
    ("churn", 5),
    ("mixed", 12),
    ("rollback", 5),
    ("burst", 1),
)


class TransactionKinds(ModelledWrites, RowChoices):
    """The body of each kind of transaction (``_op_<kind>``); the caller begins and ends it."""

    burst_rows: int

    def _op_insert(self, count: int | None = None) -> None:
        """A multi-row INSERT into one table (keyless: sometimes with an exact duplicate)."""
        state = self._pick_state()
        assert state is not None
        count = count if count is not None else self.rng.randint(1, 8)
        if state.parent_idx:
            parent = self._parent_of(state)
            if parent is None or not parent.keys:
                return
            parent_key = parent.keys.choice(self.rng)
            self._insert(state, self._new_children(state, [parent_key] * count))
            return
        rows: list[Row] = []
        for _ in range(count):
            rows.append(self._new_row(state, None, rows))
        if not state.table.has_key and state.rows and self.rng.random() < 0.3:
            rows.append(state.rows[state.keys.choice(self.rng)][0])  # an exact duplicate row
        self._insert(state, rows)

    def _op_order(self, lines: int | None = None) -> None:
        """A parent row with its children in one transaction (an order with its lines)."""
        parents = [self._states[name] for name in self._children]
        if not parents:
            self._op_insert()
            return
        parent = self.rng.choice(parents)
        row = self._new_row(parent)
        self._insert(parent, [row])
        key = parent.key_of(row)
        for child in self._children[parent.table.full_name]:
            count = lines if lines is not None else self.rng.randint(1, 6)
            self._insert(child, self._new_children(child, [key] * count))

    def _op_update(self) -> None:
        state = self._pick_state(nonempty=True)
        if state is None:
            self._op_insert()
            return
        for _ in range(self.rng.randint(1, 4)):
            key = state.keys.choice(self.rng)
            self._update(state, key, self._changes(state))

    def _op_delete(self) -> None:
        state = self._pick_state(nonempty=True)
        if state is None:
            self._op_insert()
            return
        for _ in range(self.rng.randint(1, 3)):
            if not state.keys:
                break
            self._delete(state, state.keys.choice(self.rng))

    def _op_key_update(self) -> None:
        state = self._pick_state(keyed=True, nonempty=True)
        if state is None or not state.own_key:
            self._op_update()
            return
        table = state.table
        key = state.keys.choice(self.rng)
        row = state.rows[key][0]
        parent_key = state.parent_key(row) if state.parent_idx else None
        changes = {name: self._fresh_key_value(state, name, parent_key) for name in state.own_key}
        if self.rng.random() < 0.5:
            changes.update(self._changes(state))
        new_row = list(row)
        for name, value in changes.items():
            new_row[table.column_index[name]] = value
        new_key = state.key_of(tuple(new_row))
        children = self._children.get(table.full_name, [])
        self._update(state, key, changes)
        for child in children:  # cascade the key change to the children in the same transaction
            self._rekey_children(child, key, new_key)

    def _op_delete_reinsert(self) -> None:
        """Delete a key (with its children) and insert it again, new values, same transaction."""
        state = self._pick_state(keyed=True, nonempty=True)
        if state is None:
            self._op_insert()
            return
        table = state.table
        key = state.keys.choice(self.rng)
        old = state.rows[key][0]
        children = [
            (child, [child.rows[k][0] for k in child.children.get(key, {})])
            for child in self._children.get(table.full_name, [])
        ]
        self._delete(state, key)
        parent_key = state.parent_key(old) if state.parent_idx else None
        fresh = list(self._new_row(state, parent_key))
        for name in table.locator:
            fresh[table.column_index[name]] = old[table.column_index[name]]
        self._insert(state, [tuple(fresh)])
        for child, rows in children:
            again = []
            for row in rows:
                values = list(self._new_row(child, key, again))
                for name in child.table.locator:
                    i = child.table.column_index[name]
                    values[i] = row[i]
                again.append(tuple(values))
            self._insert(child, again)

    def _op_churn(self) -> None:
        """Insert a row, update it once or more, maybe delete it: all in one transaction."""
        state = self._pick_state(top_level=True)
        if state is None:
            self._op_insert()
            return
        row = self._new_row(state)
        self._insert(state, [row])
        key = state.key_of(row)
        for _ in range(self.rng.randint(1, 3)):
            self._update(state, key, self._changes(state))
        if self.rng.random() < 0.5:
            self._delete(state, key)

    def _op_trim(self) -> None:
        """Delete up to 50 random rows (and their children) of the fullest over-full table."""
        state = self._over_full()
        if state is None:
            self._op_delete()
            return
        for _ in range(50):
            if not state.keys:
                break
            self._delete(state, state.keys.choice(self.rng))

    def _op_mixed(self) -> None:
        """2-5 random operations over several tables in one transaction."""
        ops: list[Callable[[], None]] = [
            self._op_insert,
            self._op_update,
            self._op_delete,
            self._op_order,
        ]
        for _ in range(self.rng.randint(2, 5)):
            self.rng.choice(ops)()

    def _op_burst(self) -> None:
        """One large transaction: ``burst_rows`` new rows in multi-row INSERTs, then updates."""
        target = max(1, self.burst_rows)
        done = 0
        while done < target:
            state = self._pick_state()
            assert state is not None
            count = min(target - done, self.rng.randint(50, 250))
            if state.parent_idx:
                parent = self._parent_of(state)
                if parent is None or not parent.keys:
                    done += count  # nothing to attach children to: count it as done
                    continue
                parent_keys = [parent.keys.choice(self.rng) for _ in range(count)]
                self._insert(state, self._new_children(state, parent_keys))
            else:
                rows: list[Row] = []
                for _ in range(count):
                    rows.append(self._new_row(state, None, rows))
                self._insert(state, rows)
            done += count
        for _ in range(target // 4):
            state = self._pick_state(nonempty=True)
            if state is None:
                break
            self._update(state, state.keys.choice(self.rng), self._changes(state))
