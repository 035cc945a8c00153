"""One emulator connection: transactions, isolation, LSN assignment, statement execution.

Transactions follow SQL Server (through pyodbc):

- ``autocommit=False`` (pyodbc's default) opens an implicit transaction at the first data
  statement; ``BEGIN TRAN`` nests (``@@TRANCOUNT``), ``COMMIT`` commits at count 0, ``ROLLBACK``
  (without a savepoint name) rolls everything back; ``conn.commit()`` / ``conn.rollback()`` end
  the transaction whatever the count.
- READ COMMITTED: each read sees the latest committed data. The SQLite transaction is therefore
  started lazily, at the first write (``BEGIN IMMEDIATE``, waiting up to the busy time-out; a
  time-out is error 1222), never by a read. ``WITH (TABLOCKX)`` (or ``TABLOCK, HOLDLOCK``) inside
  a transaction takes the write lock at once and holds it to the end: writers from any connection
  or process wait, readers do not (WAL).
- SNAPSHOT: ``BEGIN TRANSACTION`` starts a deferred SQLite transaction, whose snapshot is fixed at
  the first read, exactly like SQL Server's transaction sequence number. Without
  ``ALLOW_SNAPSHOT_ISOLATION`` the first statement raises 3952. A write after another transaction
  committed is an update conflict (3960).
- LSNs: SQLite serialises writers, so the writer holding the lock reads the last LSN, numbers its
  change rows ``seq = last + 16·k`` and at COMMIT takes ``commit = last + 16·(k+1)``, stamps its
  change-log rows with it, records the transaction for the capture job and commits. Commit LSNs
  are strictly increasing, rolled-back work leaves no trace, and the gaps let ``SAVE TRANSACTION``
  report ``database_transaction_begin_lsn`` = last visible commit LSN + 1, which is above every
  commit the snapshot sees and below every commit it does not.

:class:`Session` runs batches: each statement planned (plans cached across connections), run, its
SQLite errors turned into SQL Server's. Its transactions and LSNs are in
:mod:`.session_transactions`, the SQLite functions it answers in :mod:`.session_functions`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import errors
from ..batches import batch
from ..batches.batch_statement import Statement
from ..batches.variables import BatchVariables
from ..catalog import bootstrap, catalog, storage
from ..catalog.catalog import Catalog
from ..catalog.sqlite_db import give_sqlite, take_sqlite
from ..cdc import transaction_log
from ..ddl import ddl as _ddl  # noqa: F401  (registers its statements with .statements)
from ..procedures import catalog_procedures as _catalog_procedures  # noqa: F401  (sp_tables, sp_columns...)
from ..procedures import cdc_help_procedures as _cdc_help_procedures  # noqa: F401  (sp_cdc_help_* ...)
from ..procedures import cdc_job_procedures as _cdc_job_procedures  # noqa: F401  (sp_cdc_start_job ...)
from ..procedures import cdc_procedures as _cdc_procedures  # noqa: F401  (sp_cdc_enable_db ...)
from ..procedures import help_procedures as _help_procedures  # noqa: F401  (sp_help ... in PROCEDURES)
from ..procedures import procedures as _procedures  # noqa: F401  (registers EXEC with .statements)
from ..transactions.session_transactions import TransactionControl
from ..transactions.transaction import (
    BUSY_SNAPSHOT,
    LOCKING_LEVELS,
    READ_COMMITTED,
    SNAPSHOT,
    Transaction,
)
from ..translate import dml as _dml  # noqa: F401  (registers its statements with .statements)
from ..translate import statements
from ..translate.plan import Plan, Result, Slot
from ..translate.translate import Translator
from ..values import types as T
from ..values.untyped_values import adapt_untyped
from .control_flow import ControlFlow, Message, Return
from .security import Security
from .session_functions import SessionFunctions

_PLAN_CACHE: OrderedDict[tuple[str, int, str, str, str], Plan] = OrderedDict()
_PLAN_CACHE_SIZE = 4096
_PLAN_LOCK = threading.Lock()
_SPIDS = itertools.count(51)


class Session(TransactionControl, SessionFunctions, ControlFlow, Security):
    """The engine behind one DB-API connection."""

    def __init__(
        self, path: str | Path, *, autocommit: bool, timeout: float, login: str = "sa"
    ) -> None:
        self.path = str(path)
        self.login = login  # SUSER_SNAME(): the TDS server's login, else sa
        self.db_name = Path(self.path).stem
        self.timeout = timeout
        self.db = take_sqlite(self.path, timeout)
        self.autocommit = autocommit
        self.level = READ_COMMITTED
        self.tx: Transaction | None = None
        self.catalog: Catalog | None = None
        self.spid = next(_SPIDS)
        self.login_time = T.DATETIME.encode(dt.datetime.now())
        self._udf_error: BaseException | None = None
        self._statement_tran_id: int | None = None
        self.last_commit_lsn: int | None = None
        self.variables: BatchVariables | None = None  # while a batch runs
        # while a batch runs: its results so far, messages not yet sent, the errors its CATCH
        # blocks handle, @@ERROR, @@ROWCOUNT, the DECLAREs run (a loop declares once)
        self.out: list[Result] | None = None
        self.messages: list[Message] = []
        self.counting = False
        self.caught: list[errors.Error] = []
        self.last_error = 0
        self.rowcount = 0
        self.declared: set[int] = set()
        self.context_db = self.db_name  # USE master ... (see .security)
        self._register_functions()
        bootstrap.bootstrap(self.db)

    # ------------------------------------------------------------------------------------------
    # catalog and plans
    # ------------------------------------------------------------------------------------------
    def refresh_catalog(self) -> Catalog:
        """Reload the catalog when another connection (or this one) changed it."""
        if self.catalog is not None and self.catalog.token == catalog.read_token(self.db):
            return self.catalog
        if self.db.in_transaction:
            self.catalog = catalog.refresh(self.db, self.catalog)
        else:
            self.db.execute("BEGIN")
            try:
                self.catalog = catalog.refresh(self.db, self.catalog)
            finally:
                self.db.execute("COMMIT")
        return self.catalog

    def plan(self, text: str) -> Plan:
        assert self.catalog is not None
        variables = self.variables
        signature = variables.signature() if variables is not None else ""
        key = (self.catalog.db_guid, self.catalog.token, self.db_name, text, signature)
        with _PLAN_LOCK:
            plan = _PLAN_CACHE.get(key)
            if plan is not None:
                _PLAN_CACHE.move_to_end(key)
                return plan
        translator = Translator(self.catalog, self.db_name)
        if variables is not None:
            translator.variables = variables.view()
        plan = statements.plan(translator, text)
        with _PLAN_LOCK:
            _PLAN_CACHE[key] = plan
            if len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
                _PLAN_CACHE.popitem(last=False)
        return plan

    # ------------------------------------------------------------------------------------------
    # execution
    # ------------------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any]) -> list[Result]:
        statements = batch.split(sql)
        expected = sum(s.param_count for s in statements)
        if expected != len(params):
            raise errors.ProgrammingError(
                "07002",
                f"[07002] {errors.DRIVER}COUNT field incorrect or syntax error: the SQL contains "
                f"{expected} parameter markers, but {len(params)} parameters were supplied "
                "(0) (SQLExecDirectW)",
                0,
            )
        results = self._run_batch(statements, params, counting="ROWCOUNT" in sql.upper())
        if len(results) > 1:  # only the last result set may stay a live SQLite cursor
            for result in results[:-1]:
                if result.rows is not None and not isinstance(result.rows, list):
                    result.rows = list(result.rows)
        return results

    def _run_batch(
        self, statements: Sequence[Statement], params: Sequence[Any], *, counting: bool = False
    ) -> list[Result]:
        """Run one batch's statements; the results a client sees, in order (informational
        messages with the result that follows them, or in a last empty result)."""
        results: list[Result] = []
        self.out, self.messages, self.counting = results, [], counting
        self.caught, self.last_error, self.rowcount, self.declared = [], 0, 0, set()
        with self._batch(len(params)) as variables:
            try:
                for statement in statements:
                    self.run(statement, params)
            except Return:
                pass
            finally:
                self.out = None
            if self.messages:
                results.append(Result(None, None, -1, messages=tuple(self.messages)))
            if variables.tables:  # their rows must be read before the batch drops them
                for result in results:
                    if result.rows is not None and not isinstance(result.rows, list):
                        result.rows = list(result.rows)
        return results

    @contextmanager
    def _batch(self, base: int) -> Iterator[BatchVariables]:
        """The variables of one batch (``base``: its parameter count), dropped at its end."""
        variables = BatchVariables(self.db, base)
        self.variables = variables
        try:
            yield variables
        finally:
            self.variables = None
            variables.drop()

    def run(self, statement: Statement, params: Sequence[Any]) -> None:
        """Run one statement of the current batch; what it returns goes to the batch's results."""
        self._statement_tran_id = None
        self._udf_error = None
        control = statement.control
        if control is not None and control[0] in _BATCH_CONTROL:
            self._batch_control(control, params)
        elif control is not None and control[0] in _CONTROL_FLOW:
            self.control_flow(control, params)
        elif control is not None:
            self._control(control)
            self.rowcount = 0
        else:
            result = self.evaluate(statement, params)
            if result is not None:
                self._emit(result)
        if control is None or control[0] not in ("try", "block", "if", "while"):
            self.last_error = 0

    def evaluate(self, statement: Statement, params: Sequence[Any]) -> Result | None:
        """Run one plain statement; its result, not yet the client's (IF tests, assignments)."""
        variables = self.variables
        if variables is not None:
            params = variables.arguments(params)
        return self._statement(statement, params)

    def _emit(self, result: Result) -> None:
        """``result`` goes to the client, after the messages printed before it."""
        result.messages = tuple(self.messages)
        self.messages.clear()
        if result.columns is not None:
            if self.counting:  # @@ROWCOUNT is read in this batch: count the rows
                if not isinstance(result.rows, list):
                    result.rows = list(result.rows)
                self.rowcount = len(result.rows)
        else:
            self.rowcount = max(result.rowcount, 0)
        assert self.out is not None
        self.out.append(result)
        self.out.extend(result.more)  # a procedure's further result sets

    def _batch_control(self, control: tuple[Any, ...], params: Sequence[Any]) -> None:
        """IF, blocks, variables and USE (see :mod:`..batches.batch`)."""
        kind = control[0]
        if kind == "if":
            _, test, then, otherwise = control
            branch = then if self.values(test, params)[0] == 1 else otherwise
            if branch is not None:
                self.run(branch, params)
            return
        if kind == "block":
            for statement in control[1]:
                self.run(statement, params)
            return
        if kind == "use":
            self.use(str(control[1]))
            self.rowcount = 0
            return
        if kind in ("principal", "membership", "permission"):
            self.principal_statement(control)
            self.rowcount = 0
            return
        variables = self.variables
        if variables is None:  # executemany outside a batch never gets here
            raise errors.server_error(0, "variables outside a batch")
        if kind == "declare":
            _, name, type_text, value = control
            if id(control) not in self.declared:  # a DECLARE in a loop declares once
                variables.declare(name, type_text)
                self.declared.add(id(control))
            if value is not None:
                self._assign((name,), value, params)
            return
        if kind == "declare_table":
            if id(control) not in self.declared:
                variables.declare_table(control[1], control[2])
                self.declared.add(id(control))
            return
        if kind == "assign":
            self._assign(control[1], control[2], params)
            return
        if kind == "insert_variable":
            _, name, columns, source = control
            variables.view().table(name)  # 1087 before the source runs
            result = self.evaluate(source, params)
            rows = list(result.rows) if result is not None and result.rows is not None else []
            count = variables.insert(name, columns, rows)
            self._emit(Result(None, None, count, "INSERT"))
            return
        raise errors.server_error(0, f"unknown batch statement {kind}")

    def _assign(self, names: Sequence[str], select: Statement, params: Sequence[Any]) -> None:
        """``SET @v = ...`` / ``SELECT @a = x, @b = y ...``: the last row's values (no row: the
        variables keep theirs, as in SQL Server); @@ROWCOUNT the rows read."""
        variables = self.variables
        assert variables is not None
        for name in names:
            variables.scalar(name)  # 137 before the query runs
        last, count = None, 0
        result = self.evaluate(select, params)
        if result is not None and result.rows is not None:
            for row in result.rows:
                last, count = row, count + 1
        if last is not None:
            for name, value in zip(names, last, strict=True):
                variables.assign(name, value)
        self.rowcount = count

    def _statement(self, statement: Statement, params: Sequence[Any]) -> Result | None:
        cat = self.refresh_catalog()
        plan = self.plan(statement.text)
        # SQL Server opens an implicit transaction at a statement that touches a table, not at a
        # SELECT of variables or functions only (SELECT @@TRANCOUNT).
        tx = self.implicit_transaction() if plan.reads_table else self.tx
        if tx is not None and tx.level in LOCKING_LEVELS and tx.sqlite_mode is None:
            self.ensure_write(tx)
        level = tx.level if tx is not None else self.level
        if level == SNAPSHOT and (tx is None or not tx.snapshot_checked):
            if not cat.allow_snapshot:
                if tx is not None:
                    self.rollback_transaction()
                raise errors.snapshot_not_allowed(self.db_name)
            if tx is not None:
                tx.snapshot_checked = True
        if plan.kind == "query":
            return self._query(plan, params)
        if plan.kind == "dml":
            return self._dml(plan, params)
        return plan.payload(self, params)

    def bind(self, slots: tuple[Slot, ...], params: Sequence[Any]) -> list[Any]:
        adapt = adapt_untyped
        return [
            slot.encoder(params[slot.param]) if slot.encoder else adapt(params[slot.param])
            for slot in slots
        ]

    def sqlite(
        self, sql: str, args: Sequence[Any] = (), plan: Plan | None = None
    ) -> sqlite3.Cursor:
        """Run SQLite text, turning SQLite errors into SQL Server errors."""
        try:
            return self.db.execute(sql, args)
        except sqlite3.Error as exc:
            raise self.map_error(exc, plan) from None

    def _query(self, plan: Plan, params: Sequence[Any]) -> Result:
        tx = self.tx
        if plan.lock and tx is not None:
            self.ensure_write(tx)
        assert plan.sql is not None
        cursor = self.sqlite(plan.sql, self.bind(plan.slots, params), plan)
        return Result(plan.columns, cursor, -1)

    def _dml(self, plan: Plan, params: Sequence[Any]) -> Result:
        assert plan.sql is not None and plan.target is not None
        args = self.bind(plan.slots, params)
        with self.write_scope() as tx:
            tx.cmd += 1
            if plan.updates_key:
                count = self._key_update(plan, args)
            else:
                count = self.sqlite(plan.sql, args, plan).rowcount
            target = plan.target
            if target.tracked and target.object_id is not None:
                tx.touched.add(target.object_id)
                if plan.updates_key:
                    transaction_log.order_split_update(self.db, target.object_id, tx.cmd)
        return Result(None, None, count, plan.verb)

    def _key_update(self, plan: Plan, args: Sequence[Any]) -> int:
        """Run a key-changing UPDATE as SQL Server does (see ``Translator._key_update``)."""
        assert plan.sql is not None and plan.target is not None
        table = storage.quote(plan.target.physical)
        work = 'temp."_emu_key_update"'
        columns = plan.target.columns
        names = ", ".join(storage.quote(c.name) for c in columns)
        picks = ", ".join(f'u."__c{i}"' for i in range(len(columns)))
        self.db.execute("SAVEPOINT _emu_statement")
        try:
            self.db.execute(f"DROP TABLE IF EXISTS {work}")
            self.sqlite(f"CREATE TEMP TABLE _emu_key_update AS {plan.sql}", args, plan)
            (count,) = self.db.execute(f"SELECT COUNT(*) FROM {work}").fetchone()
            sets = ", ".join(f'{storage.quote(c.name)} = u."__c{i}"' for i, c in enumerate(columns))
            self.sqlite(
                f"UPDATE {table} SET {sets} FROM {work} AS u "
                f'WHERE u."__rid" = {table}.rowid AND u."__same" = 1',
                (),
                plan,
            )
            self.sqlite(
                f'DELETE FROM {table} WHERE rowid IN (SELECT "__rid" FROM {work} '
                'WHERE "__same" = 0)',
                (),
                plan,
            )
            self.sqlite(
                f"INSERT INTO {table} ({names}) SELECT {picks} FROM {work} AS u "
                'WHERE u."__same" = 0 ORDER BY u."__rid"',
                (),
                plan,
            )
            self.db.execute(f"DROP TABLE {work}")
        except BaseException:
            self.db.execute("ROLLBACK TO _emu_statement")
            self.db.execute("RELEASE _emu_statement")
            raise
        self.db.execute("RELEASE _emu_statement")
        return int(count)

    def executemany(self, sql: str, seq_of_params: Sequence[Sequence[Any]]) -> int:
        statements = batch.split(sql)
        total = 0
        for params in seq_of_params:
            if len(statements) == 1 and statements[0].param_count != len(params):
                self.execute(sql, params)  # raises the COUNT error
            for result in self._run_batch(statements, params):
                if result.columns is None and result.rowcount >= 0:
                    total += result.rowcount
        return total

    # ------------------------------------------------------------------------------------------
    # errors
    # ------------------------------------------------------------------------------------------
    def map_error(self, exc: sqlite3.Error, plan: Plan | None = None) -> errors.Error:
        if self._udf_error is not None:
            pending = self._udf_error
            self._udf_error = None
            if isinstance(pending, errors.Error):
                return pending
            return errors.server_error(50000, f"{type(pending).__name__}: {pending}")
        message = str(exc)
        target = plan.target if plan is not None else None
        table = f"{self.db_name}.{target.display}" if target else self.db_name
        if isinstance(exc, sqlite3.IntegrityError):
            if "UNIQUE constraint failed" in message or "PRIMARY KEY" in message:
                if target is not None and target.key:
                    return errors.primary_key_violation(target.pk_name or "PK", target.display)
                return errors.server_error(
                    2601,
                    "Cannot insert duplicate key row in object "
                    f"'{target.display if target else '?'}'.",
                    sqlstate="23000",
                    cls=errors.IntegrityError,
                )
            if "NOT NULL constraint failed" in message or "CHECK constraint failed" in message:
                column = message.rsplit(".", 1)[-1].strip().strip('"')
                if "CHECK" in message:
                    column = message.split(":", 1)[-1].strip()
                action = (
                    "UPDATE"
                    if plan is not None and plan.sql and plan.sql.startswith("UPDATE")
                    else "INSERT"
                )
                return errors.null_violation(column, table, action)
            return errors.server_error(547, message, sqlstate="23000", cls=errors.IntegrityError)
        if isinstance(exc, sqlite3.OperationalError):
            code = getattr(exc, "sqlite_errorcode", None)
            if code == BUSY_SNAPSHOT:
                return errors.snapshot_update_conflict(target.display if target else "?")
            if "locked" in message or "busy" in message:
                return errors.lock_timeout()
            if "no such table" in message:
                return errors.invalid_object(message.split(":", 1)[-1].strip())
            if "no such column" in message:
                return errors.invalid_column(message.split(":", 1)[-1].strip())
        return errors.server_error(
            50000, f"SQLite: {message}", sqlstate="HY000", cls=errors.DatabaseError
        )

    # ------------------------------------------------------------------------------------------
    # connection-level API
    # ------------------------------------------------------------------------------------------
    def set_autocommit(self, value: bool) -> None:
        if value and not self.autocommit and self.tx is not None:
            self.commit_transaction()
        self.autocommit = value

    def close(self) -> None:
        try:
            if self.tx is not None:
                self.rollback_transaction()
        finally:
            give_sqlite(self.path, self.timeout, self.db)


_BATCH_CONTROL = frozenset(
    (
        *("if", "block", "use", "declare", "declare_table", "assign", "insert_variable"),
        *("principal", "membership", "permission"),
    )
)
_CONTROL_FLOW = frozenset(
    ("while", "try", "break", "continue", "return", "print", "throw", "raiserror", "waitfor")
)
