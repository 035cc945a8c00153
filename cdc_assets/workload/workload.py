"""A deterministic OLTP workload for a CDC source, sent as plain T-SQL over any DB-API connection.

:class:`Workload` runs realistic transactions (the kinds of :mod:`.transaction_kinds`), each an
explicit ``BEGIN TRAN`` .. ``COMMIT`` (or ``ROLLBACK``), and keeps a model of what every table
must contain (:mod:`.table_model`), so tests compare the source (and anything replayed from its
change tables) with :meth:`Workload.expected_rows`. An error or an interrupt inside a transaction
rolls it back in the database and in the model.

The same seed on the same starting database gives the same statements: all choices come from one
``random.Random(seed)`` and the model is iterated in insertion order only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any

from .demo_schema import DEMO_TABLES, TableDef
from .table_model import Row
from .transaction_kinds import TRANSACTION_KINDS, TransactionKinds

__all__ = ["StepResult", "Workload", "WorkloadStats"]


@dataclass
class WorkloadStats:
    """Counts of what the workload did (committed work only, except ``rolled_back``)."""

    transactions: int = 0
    rolled_back: int = 0
    rows: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    statements: int = 0
    started: float = field(default_factory=time.monotonic)
    last_kind: str = ""
    last_commit_at: dt.datetime | None = None  # local wall clock, like the server's GETDATE()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class StepResult:
    """One transaction: its kind, whether it committed, rows changed, statements sent."""

    kind: str
    committed: bool
    rows: int
    statements: int


class Workload(TransactionKinds):
    """Seeded transactions against ``tables`` through ``conn``, with a model of their contents.

    The connection is switched to autocommit; every transaction is an explicit ``BEGIN TRAN`` ..
    ``COMMIT`` (or ``ROLLBACK``). With ``load=True`` (default) the model starts from the current
    table contents, so a workload can continue on an existing database. With ``record=True`` every
    statement and its parameters are kept in :attr:`statements`.
    """

    def __init__(
        self,
        conn: Any,
        *,
        seed: int = 0,
        tables: Sequence[TableDef] = DEMO_TABLES,
        load: bool = True,
        record: bool = False,
        burst_rows: int = 500,
        max_rows: int | None = None,
    ) -> None:
        super().__init__(tables)
        self.conn = conn
        # A table holding more rows than this gets a "trim" transaction (deletes) instead of a
        # random one, so a workload left running keeps the tables' sizes bounded.
        self.max_rows = max_rows
        self.seed = seed
        self.rng = Random(seed)
        self.burst_rows = burst_rows
        self.stats = WorkloadStats()
        self.statements = [] if record else None
        self._pending = Counter[str]()
        self._step_statements = 0
        if getattr(conn, "autocommit", True) is not True:
            conn.autocommit = True
        self._cursor = conn.cursor()
        if load:
            self._load(conn)

    # -- transactions ---------------------------------------------------------------------
    def _begin(self) -> None:
        self._exec("BEGIN TRAN")
        self._journal = []
        self._pending = Counter()

    def _commit(self) -> int:
        self._exec("COMMIT")
        self._journal = None
        self.stats.last_commit_at = dt.datetime.now()
        pending = self._pending
        rows = pending["inserted"] + pending["updated"] + pending["deleted"]
        self.stats.inserted += pending["inserted"]
        self.stats.updated += pending["updated"]
        self.stats.deleted += pending["deleted"]
        self.stats.rows += rows
        self.stats.transactions += 1
        return rows

    def _rollback(self) -> None:
        self._exec("ROLLBACK")
        self._undo()
        self.stats.rolled_back += 1

    def _abort(self) -> None:
        """After an error or an interrupt inside a transaction: roll back, restore the model."""
        if self._journal is None:
            return
        try:
            self._cursor.execute("ROLLBACK")
        except Exception:
            with contextlib.suppress(Exception):
                self.conn.rollback()
        self._undo()

    def step(self) -> StepResult:
        """Run one transaction of a randomly chosen kind (a trim of an over-full table first)."""
        if self.max_rows is not None and self._over_full() is not None:
            return self.run_transaction("trim")
        kinds, weights = zip(*TRANSACTION_KINDS, strict=True)
        kind = self.rng.choices(kinds, weights=weights)[0]
        return self.run_transaction(kind)

    def run_transaction(self, kind: str) -> StepResult:
        """Run one transaction of ``kind`` (a name in :data:`TRANSACTION_KINDS`)."""
        operations: dict[str, Callable[[], None]] = {
            "insert": self._op_insert,
            "order": self._op_order,
            "update": self._op_update,
            "delete": self._op_delete,
            "key_update": self._op_key_update,
            "delete_reinsert": self._op_delete_reinsert,
            "churn": self._op_churn,
            "mixed": self._op_mixed,
            "rollback": self._op_mixed,
            "burst": self._op_burst,
            "trim": self._op_trim,
        }
        if kind not in operations:
            raise ValueError(f"unknown transaction kind {kind!r}; use one of {sorted(operations)}")
        self._step_statements = 0
        self._begin()
        try:
            operations[kind]()
            if kind == "rollback":
                self._rollback()
                committed, rows = False, 0
            else:
                rows = self._commit()
                committed = True
        except BaseException:
            self._abort()
            raise
        self.stats.statements += self._step_statements
        self.stats.last_kind = kind
        return StepResult(kind, committed, rows, self._step_statements)

    def touch_every_table(self) -> StepResult:
        """One transaction that inserts a row into every table (children under an existing
        parent row): whatever the random steps did, each table then has change rows in the
        next range."""
        self._step_statements = 0
        self._begin()
        try:
            for state in self._states.values():  # parents come before their children
                if not state.parent_idx:
                    self._insert(state, [self._new_row(state)])
                    continue
                parent = self._parent_of(state)
                if parent is not None and parent.keys:
                    self._insert(state, self._new_children(state, [parent.keys.choice(self.rng)]))
            rows = self._commit()
        except BaseException:
            self._abort()
            raise
        self.stats.statements += self._step_statements
        self.stats.last_kind = "touch"
        return StepResult("touch", True, rows, self._step_statements)

    def seed_rows(self, rows_per_table: int, *, rows_per_transaction: int = 500) -> None:
        """Initial load: ``rows_per_table`` rows per table in multi-row INSERT transactions."""
        for state in self._states.values():
            remaining = rows_per_table
            while remaining > 0:
                count = min(remaining, rows_per_transaction)
                self._begin()
                try:
                    if state.parent_idx:
                        parent = self._parent_of(state)
                        if parent is not None and parent.keys:
                            keys = [parent.keys.choice(self.rng) for _ in range(count)]
                            self._insert(state, self._new_children(state, keys))
                    else:
                        rows: list[Row] = []
                        for _ in range(count):
                            rows.append(self._new_row(state, None, rows))
                        self._insert(state, rows)
                    self._commit()
                except BaseException:
                    self._abort()
                    raise
                remaining -= count

    def run(
        self,
        seconds: float | None = None,
        transactions: int | None = None,
        on_progress: Callable[[WorkloadStats], None] | None = None,
        *,
        tps: float | None = None,
    ) -> WorkloadStats:
        """Run steps until ``seconds`` passed or ``transactions`` ran (both None: until
        interrupted), at most ``tps`` transactions per second; ``on_progress(stats)`` after each.
        """
        started = time.monotonic()
        count = 0
        interval = 1.0 / tps if tps else 0.0
        while True:
            if transactions is not None and count >= transactions:
                break
            if seconds is not None and time.monotonic() - started >= seconds:
                break
            self.step()
            count += 1
            if on_progress is not None:
                on_progress(self.stats)
            if interval:
                delay = started + count * interval - time.monotonic()
                if seconds is not None:
                    delay = min(delay, started + seconds - time.monotonic())
                if delay > 0:
                    time.sleep(delay)
        return self.stats

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._cursor.close()
