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
"""

from __future__ import annotations

import datetime as dt
import itertools
import sqlite3
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import batch, bootstrap, catalog, errors, statements, storage, transaction_log, udfs
from . import catalog_procedures as _catalog_procedures  # noqa: F401  (sp_tables, sp_columns...)
from . import cdc_help_procedures as _cdc_help_procedures  # noqa: F401  (sp_cdc_help_* ...)
from . import cdc_job_procedures as _cdc_job_procedures  # noqa: F401  (sp_cdc_start_job ...)
from . import cdc_procedures as _cdc_procedures  # noqa: F401  (sp_cdc_enable_db ...)
from . import ddl as _ddl  # noqa: F401  (registers its statements with .statements)
from . import dml as _dml  # noqa: F401  (registers its statements with .statements)
from . import help_procedures as _help_procedures  # noqa: F401  (sp_help ... in PROCEDURES)
from . import procedures as _procedures  # noqa: F401  (registers EXEC with .statements)
from . import types as T
from .catalog import Catalog
from .functions import ALL_OPTIONS, NET_OPTIONS
from .plan import Plan, Result, Slot
from .session_views import ISOLATION_CODES
from .sqlite_db import give_sqlite, take_sqlite
from .transaction import Transaction
from .translate import Translator
from .variables import BatchVariables

BUSY_SNAPSHOT = 517
READ_COMMITTED = "READ COMMITTED"
SNAPSHOT = "SNAPSHOT"
# REPEATABLE READ and SERIALIZABLE: the transaction takes the database's write lock at its first
# statement and holds it to its end, so nothing it read changes and nothing appears in a range it
# read until it ends (SQL Server locks only the rows and key ranges read; here every other writer
# waits, readers do not). READ UNCOMMITTED reads committed data (a stronger guarantee).
LOCKING_LEVELS = ("REPEATABLE READ", "SERIALIZABLE")

_PLAN_CACHE: OrderedDict[tuple[str, int, str, str, str], Plan] = OrderedDict()
_PLAN_CACHE_SIZE = 4096
_PLAN_LOCK = threading.Lock()
_SPIDS = itertools.count(51)
_TRAN_IDS = itertools.count(1_000_000 + (uuid.uuid4().int % 1_000_000) * 1000)


class Session:
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
        self._register_functions()
        bootstrap.bootstrap(self.db)

    # ------------------------------------------------------------------------------------------
    # SQLite functions bound to this session
    # ------------------------------------------------------------------------------------------
    def _guard(self, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except BaseException as exc:
                self._udf_error = exc
                raise

        return call

    def _register_functions(self) -> None:
        db = self.db
        db.create_function("_emu_cmd", 0, self._guard(self._fn_cmd))
        db.create_function("_emu_seq", 0, self._guard(self.next_seq))
        db.create_function("_emu_tran_id", 0, self._fn_tran_id)
        db.create_function("_emu_tran_is_snapshot", 0, self._fn_is_snapshot)
        db.create_function("_emu_tran_begin_time", 0, self._fn_begin_time)
        db.create_function("_emu_tran_type", 0, self._fn_tran_type)
        db.create_function("_emu_tran_begin_lsn", 0, self._fn_begin_lsn)
        db.create_function("_emu_tran_savepoint_lsn", 0, self._fn_savepoint_lsn)
        db.create_function("_emu_trancount", 0, lambda: self.tx.trancount if self.tx else 0)
        db.create_function("_emu_spid", 0, lambda: self.spid)
        db.create_function("_emu_login_time", 0, lambda: self.login_time)
        db.create_function("_emu_isolation_level", 0, self._fn_isolation_level)
        db.create_function("_emu_login", 0, lambda: self.login)
        db.create_function("_emu_db_name", 0, lambda: self.db_name, deterministic=True)
        db.create_function("_emu_now", 2, self._guard(self._fn_now))
        db.create_function("_emu_newid", 0, lambda: str(uuid.uuid4()).upper())
        db.create_function("_emu_check_range", 7, self._guard(self._fn_check_range))
        db.create_function("_emu_table_rows", 1, self._guard(self._fn_table_rows))

    def _fn_cmd(self) -> int:
        if self.tx is None:
            raise errors.server_error(0, "change logged outside a transaction")
        return self.tx.cmd

    def next_seq(self) -> int:
        """The next sequence number (an LSN) of the writing transaction."""
        tx = self.tx
        if tx is None or tx.seq_base is None:
            raise errors.server_error(0, "change logged outside a write transaction")
        tx.seq_count += 1
        return tx.seq_base + storage.LSN_STEP * tx.seq_count

    def _fn_tran_id(self) -> int | None:
        if self.tx is not None:
            return self.tx.tran_id
        if self._statement_tran_id is None:
            self._statement_tran_id = next(_TRAN_IDS)
        return self._statement_tran_id

    def _fn_is_snapshot(self) -> int:
        level = self.tx.level if self.tx else self.level
        return 1 if level == SNAPSHOT else 0

    def _fn_isolation_level(self) -> int:
        """sys.dm_exec_sessions.transaction_isolation_level: the session's level, as last SET."""
        return ISOLATION_CODES[self.level]

    def _fn_begin_time(self) -> str | None:
        return T.DATETIME.encode(self.tx.begin_time) if self.tx else None

    def _fn_tran_type(self) -> int:
        if self.tx is None or (not self.tx.wrote and self.tx.begin_lsn is None):
            return 2
        return 1

    def _fn_begin_lsn(self) -> str | None:
        if self.tx is None or self.tx.begin_lsn is None:
            return None
        return T.encode_lsn_numeric(udfs.lsn_numeric(self.tx.begin_lsn))

    def _fn_savepoint_lsn(self) -> str | None:
        if self.tx is None or self.tx.savepoint_lsn is None:
            return None
        return T.encode_lsn_numeric(udfs.lsn_numeric(self.tx.savepoint_lsn))

    def _fn_table_rows(self, physical: str) -> int:
        """``sys.partitions.rows`` of a table: its rows as this session sees them."""
        try:
            (count,) = self.db.execute(f"SELECT COUNT(*) FROM {storage.quote(physical)}").fetchone()
        except sqlite3.OperationalError:  # dropped meanwhile
            return 0
        return int(count)

    def _fn_now(self, clock: str, type_sql: str) -> Any:
        sql_type, _ = T.parse_type_text(type_sql)
        if clock == "utc":
            moment: dt.datetime = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        elif clock == "offset":
            moment = dt.datetime.now().astimezone()
        else:
            moment = dt.datetime.now()
        return sql_type.encode(moment)

    def _fn_check_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        minimum: bytes | None,
        maximum: bytes | None,
        label: str,
        option: str | None,
        kind: str,
    ) -> int:
        allowed = ALL_OPTIONS if kind == "all" else NET_OPTIONS
        normalized = " ".join(str(option).lower().split()) if option is not None else None
        if (
            lo is None
            or hi is None
            or minimum is None
            or maximum is None
            or normalized not in allowed
            or bytes(lo) < bytes(minimum)
            or bytes(hi) > bytes(maximum)
            or bytes(lo) > bytes(hi)
        ):
            raise errors.cdc_function_range(label)
        return 1

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
        results: list[Result] = []
        with self._batch(len(params)) as variables:
            for statement in statements:
                for result in self.run(statement, params):
                    results.append(result)
                    results.extend(result.more)  # a procedure's further result sets
            if variables.tables:  # their rows must be read before the batch drops them
                for result in results:
                    if result.rows is not None and not isinstance(result.rows, list):
                        result.rows = list(result.rows)
        if len(results) > 1:  # only the last result set may stay a live SQLite cursor
            for result in results[:-1]:
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

    def run(self, statement: batch.Statement, params: Sequence[Any]) -> list[Result]:
        """Run one statement of the current batch; its results (blocks may have several)."""
        self._statement_tran_id = None
        self._udf_error = None
        control = statement.control
        if control is not None and control[0] in _BATCH_CONTROL:
            return self._batch_control(control, params)
        if control is not None:
            self._control(control)
            return []
        variables = self.variables
        if variables is not None:
            params = variables.arguments(params)
        result = self._statement(statement, params)
        return [] if result is None else [result]

    def _batch_control(self, control: tuple[Any, ...], params: Sequence[Any]) -> list[Result]:
        """IF, blocks, variables and USE (see :mod:`.batch`)."""
        kind = control[0]
        if kind == "if":
            _, test, then, otherwise = control
            (result,) = self.run(test, params)
            assert result.rows is not None
            (chosen,) = next(iter(result.rows))
            branch = then if chosen == 1 else otherwise
            return [] if branch is None else self.run(branch, params)
        if kind == "block":
            results: list[Result] = []
            for statement in control[1]:
                results.extend(self.run(statement, params))
            return results
        if kind == "use":
            name = str(control[1])
            if name.lower() != self.db_name.lower():
                raise errors.server_error(
                    911,
                    f"Database '{name}' does not exist. Make sure that the name is entered "
                    "correctly.",
                )
            return []
        variables = self.variables
        if variables is None:  # executemany outside a batch never gets here
            raise errors.server_error(0, "variables outside a batch")
        if kind == "declare":
            _, name, type_text, value = control
            variables.declare(name, type_text)
            if value is not None:
                self._assign((name,), value, params)
            return []
        if kind == "declare_table":
            variables.declare_table(control[1], control[2])
            return []
        if kind == "assign":
            self._assign(control[1], control[2], params)
            return []
        if kind == "insert_variable":
            _, name, columns, source = control
            variables.view().table(name)  # 1087 before the source runs
            rows: list[Sequence[Any]] = []
            for result in self.run(source, params):
                if result.rows is not None:
                    rows.extend(result.rows)
            return [Result(None, None, variables.insert(name, columns, rows), "INSERT")]
        raise errors.server_error(0, f"unknown batch statement {kind}")

    def _assign(self, names: Sequence[str], select: batch.Statement, params: Sequence[Any]) -> None:
        """``SET @v = ...`` / ``SELECT @a = x, @b = y ...``: the last row's values (no row: the
        variables keep theirs, as in SQL Server)."""
        variables = self.variables
        assert variables is not None
        for name in names:
            variables.scalar(name)  # 137 before the query runs
        last = None
        for result in self.run(select, params):
            if result.rows is not None:
                for row in result.rows:
                    last = row
        if last is not None:
            for name, value in zip(names, last, strict=True):
                variables.assign(name, value)

    def _statement(self, statement: batch.Statement, params: Sequence[Any]) -> Result | None:
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
        adapt = T.adapt_untyped
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
            with self._batch(len(params)):
                for statement in statements:
                    for result in self.run(statement, params):
                        if result.rowcount >= 0:
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
    # transactions
    # ------------------------------------------------------------------------------------------
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
            tran_id=next(_TRAN_IDS),
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
            if isinstance(name, str) and name.lower() in (s.lower() for s in self.tx.savepoints):
                self._rollback_to(self.tx, name)
            else:
                self.rollback_transaction()
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
    ("if", "block", "use", "declare", "declare_table", "assign", "insert_variable")
)
