"""A session's transactions: BEGIN / COMMIT / ROLLBACK / SAVE and the SET options that shape
them, SQLite's write lock taken when the transaction first writes, and the LSNs: the sequence
numbers of its change rows and its commit LSN, stamped on its change-log rows at COMMIT (the rules
are in :mod:`.session`'s docstring).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .. import errors
from ..catalog import storage
from ..cdc import transaction_log
from ..values import types as T
from .transaction import BUSY_SNAPSHOT, READ_COMMITTED, SNAPSHOT, TRAN_IDS, Transaction


class TransactionControl:
    """The part of :class:`.session.Session` that opens, numbers and ends its transactions."""

    db: sqlite3.Connection
    autocommit: bool
    level: str
    tx: Transaction | None
    last_commit_lsn: int | None
    map_error: Callable[[sqlite3.Error], errors.Error]

    def next_seq(self) -> int:
        """The next sequence number (an LSN) of the writing transaction."""
        tx = self.tx
        if tx is None or tx.seq_base is None:
            raise errors.server_error(0, "change logged outside a write transaction")
        tx.seq_count += 1
        return tx.seq_base + storage.LSN_STEP * tx.seq_count

    def implicit_transaction(self) -> Transaction | None:
        """With autocommit off, the first data statement opens a transaction (pyodbc)."""
        if self.tx is None and not self.autocommit:
            return self.begin_transaction(implicit=True)
        return self.tx

    def begin_transaction(
        self, *, implicit: bool, name: str | None = None, level: str | None = None
    ) -> Transaction:
        tx = Transaction(
            level=level or self.level,
            tran_id=next(TRAN_IDS),
            begin_time=storage.now(),
            implicit=implicit,
            name=name,
        )
        self.tx = tx
        if tx.level == SNAPSHOT:
            self.db.execute("BEGIN")  # deferred: the snapshot is fixed by the first read
            tx.sqlite_mode = "read"
        return tx

    def ensure_write(self, tx: Transaction) -> None:
        """Hold SQLite's write lock (and know the last LSN) for the rest of the transaction."""
        if tx.sqlite_mode == "write":
            return
        try:
            if tx.sqlite_mode is None:
                self.db.execute("BEGIN IMMEDIATE")
                tx.sqlite_mode = "write"
                for name in tx.savepoints:
                    self.db.execute(f"SAVEPOINT {storage.quote(name)}")
                    tx.sqlite_savepoints.add(name.lower())
            else:
                # a snapshot transaction: take the write lock now; fails if it became stale
                self.db.execute("DELETE FROM _emu_jobs WHERE 0")
                tx.sqlite_mode = "write"
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) == BUSY_SNAPSHOT:
                self.rollback_transaction()
                raise errors.snapshot_update_conflict("?") from None
            if tx.sqlite_mode is None and self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise errors.lock_timeout() from None
        (last,) = self.db.execute("SELECT last_lsn FROM _emu_state").fetchone()
        tx.seq_base = int(last)
        tx.seq_count = 0
        if tx.begin_lsn is None:
            tx.begin_lsn = tx.seq_base + 1

    @contextmanager
    def write_scope(self, *, level: str | None = None) -> Iterator[Transaction]:
        """Run writes in the open transaction, or in their own one when there is none."""
        tx = self.tx
        ephemeral = tx is None
        if tx is None:
            tx = self.begin_transaction(implicit=False, level=level)
        try:
            self.ensure_write(tx)
            tx.wrote = True
            if tx.first_write_time is None:
                tx.first_write_time = storage.now()
        except BaseException:
            if ephemeral and self.tx is tx:
                self.rollback_transaction()
            raise
        if ephemeral:
            try:
                yield tx
            except BaseException:
                if self.tx is tx:
                    self.rollback_transaction()
                raise
            if self.tx is tx:
                self.commit_transaction()
            return
        # inside a user transaction a failed statement is undone alone (XACT_ABORT OFF)
        self.db.execute("SAVEPOINT _emu_write")
        try:
            yield tx
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK TO _emu_write")
                self.db.execute("RELEASE _emu_write")
            raise
        if self.db.in_transaction:
            self.db.execute("RELEASE _emu_write")

    def commit_transaction(self) -> None:
        tx = self.tx
        if tx is None:
            return
        self.tx = None
        try:
            if tx.sqlite_mode == "write":
                if tx.wrote:
                    self._stamp(tx)
                self.db.execute("COMMIT")
            elif tx.sqlite_mode == "read" and self.db.in_transaction:
                self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise self.map_error(exc) from None
        self._log_savepoint(tx)

    def _log_savepoint(self, tx: Transaction) -> None:
        """Put a read-only transaction's savepoint record (LSN S) in the emulated log.

        In SQL Server ``SAVE TRANSACTION`` writes a log record at
        ``database_transaction_begin_lsn``; the capture job later passes it, so
        ``sys.fn_cdc_get_max_lsn()`` reaches S even if no tracked table changes afterwards. The
        snapshot transaction cannot take the write lock while it runs (another connection holds
        the table lock), so the record is written when it ends; if the lock is busy for long, it
        is skipped (the next commit moves the log past S anyway).
        """
        if tx.begin_lsn is None or tx.seq_base is not None or not tx.savepoints:
            return
        (previous,) = self.db.execute("PRAGMA busy_timeout").fetchone()
        try:
            self.db.execute("PRAGMA busy_timeout = 250")
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "UPDATE _emu_state SET last_lsn = ? WHERE last_lsn < ?",
                (tx.begin_lsn, tx.begin_lsn),
            )
            self.db.execute("COMMIT")
        except sqlite3.OperationalError:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {int(previous)}")

    def _stamp(self, tx: Transaction) -> None:
        """Assign the commit LSN and record the transaction for the capture job."""
        assert tx.seq_base is not None
        commit_lsn = tx.seq_base + storage.LSN_STEP * (tx.seq_count + 1)
        end = storage.now()
        (tran_id,) = self.db.execute(
            "UPDATE _emu_state SET last_lsn = ?, last_tran_id = last_tran_id + 1 "
            "RETURNING last_tran_id",
            (commit_lsn,),
        ).fetchone()
        rows = 0
        written: list[tuple[int, int]] = []
        for oid in sorted(tx.touched):
            try:
                count = self.db.execute(
                    f"UPDATE {storage.quote(transaction_log.log_table(oid))} SET lsn = ? "
                    "WHERE lsn IS NULL",
                    (commit_lsn,),
                ).rowcount
            except sqlite3.OperationalError:  # the table stopped being tracked in this txn
                continue
            if count > 0:
                rows += count
                written.append((commit_lsn, oid))
        if tx.ddl_logged:
            self.db.execute("UPDATE _emu_ddl_log SET lsn = ? WHERE lsn IS NULL", (commit_lsn,))
        if rows:
            self.db.execute(
                "INSERT INTO _emu_transactions (lsn, tran_id, begin_time, end_time, begin_lsn) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    commit_lsn,
                    tran_id,
                    T.DATETIME.encode(tx.first_write_time or tx.begin_time),
                    T.DATETIME.encode(end),
                    tx.begin_lsn,
                ),
            )
            self.db.executemany(
                "INSERT INTO _emu_transaction_tables (lsn, object_id) VALUES (?, ?)", written
            )
        self.last_commit_lsn = commit_lsn

    def rollback_transaction(self) -> None:
        tx = self.tx
        self.tx = None
        if tx is not None and self.db.in_transaction:
            self.db.execute("ROLLBACK")
        if tx is not None:
            self._log_savepoint(tx)

    def _rollback_to(self, tx: Transaction, name: str) -> None:
        lowered = [s.lower() for s in tx.savepoints]
        index = len(lowered) - 1 - lowered[::-1].index(name.lower())
        if name.lower() in tx.sqlite_savepoints and self.db.in_transaction:
            self.db.execute(f"ROLLBACK TO {storage.quote(name)}")
        del tx.savepoints[index + 1 :]
        tx.sqlite_savepoints = {s.lower() for s in tx.savepoints} & tx.sqlite_savepoints

    def _save(self, name: str) -> None:
        tx = self.tx
        if tx is None:
            raise errors.server_error(
                628, "Cannot issue SAVE TRANSACTION when there is no active transaction."
            )
        if tx.begin_lsn is None:
            (last,) = self.db.execute("SELECT last_lsn FROM _emu_state").fetchone()
            tx.begin_lsn = int(last) + 1
        tx.savepoint_lsn = (
            tx.begin_lsn
            if tx.seq_base is None
            else tx.seq_base + storage.LSN_STEP * tx.seq_count + 1
        )
        tx.savepoints.append(name)
        if tx.sqlite_mode is not None:
            self.db.execute(f"SAVEPOINT {storage.quote(name)}")
            tx.sqlite_savepoints.add(name.lower())

    def _control(self, control: tuple[object, ...]) -> None:
        kind = control[0]
        if kind == "begin":
            # with IMPLICIT_TRANSACTIONS on (pyodbc autocommit off) BEGIN TRAN itself first opens
            # the implicit transaction, so @@TRANCOUNT becomes 2, as in SQL Server
            if self.tx is None and self.autocommit:
                self.begin_transaction(implicit=False, name=control[1])  # type: ignore[arg-type]
            else:
                self.implicit_transaction()
                assert self.tx is not None
                self.tx.trancount += 1
        elif kind == "commit":
            if self.tx is None:
                raise errors.no_transaction("COMMIT")
            self.tx.trancount -= 1
            if self.tx.trancount <= 0:
                self.commit_transaction()
        elif kind == "rollback":
            if self.tx is None:
                raise errors.no_transaction("ROLLBACK")
            name = control[1]
            if not isinstance(name, str):
                self.rollback_transaction()
            elif name.lower() in (s.lower() for s in self.tx.savepoints):
                self._rollback_to(self.tx, name)  # the transaction stays open, count unchanged
            elif self.tx.name is not None and name.lower() == self.tx.name.lower():
                self.rollback_transaction()
            else:
                raise errors.server_error(
                    6401,
                    f"Cannot roll back {name}. No transaction or savepoint of that name was found.",
                    sqlstate="25000",
                )
        elif kind == "save":
            self.implicit_transaction()
            self._save(str(control[1]))
        elif kind == "isolation":
            self.level = str(control[1])
        elif kind == "allow_snapshot":
            self._alter_allow_snapshot(bool(control[1]))
        elif kind == "implicit_transactions":
            # SET IMPLICIT_TRANSACTIONS ON is what autocommit off is (pyodbc asks the driver, the
            # driver may send this); OFF leaves an open transaction open until COMMIT, as in SQL
            # Server (the connection attribute's setter commits it instead).
            self.autocommit = not control[1]
        elif kind == "lock_timeout":
            ms = int(control[1])  # type: ignore[call-overload]
            self.db.execute(f"PRAGMA busy_timeout = {ms if ms >= 0 else 2**31 - 1}")
        return None

    def _alter_allow_snapshot(self, on: bool) -> None:
        tx = self.tx
        if tx is not None:
            if tx.wrote or tx.sqlite_mode is not None or not tx.implicit:
                raise errors.server_error(
                    226, "ALTER DATABASE statement not allowed within multi-statement transaction."
                )
            self.tx = None  # an empty implicit transaction: nothing to keep
        with self.write_scope(level=READ_COMMITTED):
            self.db.execute(
                "UPDATE _emu_meta SET value = ? WHERE key = 'allow_snapshot'", (1 if on else 0,)
            )
            storage.bump_catalog(self.db, ())
