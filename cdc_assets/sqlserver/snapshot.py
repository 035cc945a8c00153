"""Initial snapshots of captured tables and the LSN each is consistent at (DESIGN.md section 3).

**Exact** (default when the database has ``ALLOW_SNAPSHOT_ISOLATION ON``), as in Materialize's
``cdc.rs``. SQL Server has no call that returns "the LSN of this snapshot", so two connections
make one:

1. A (read committed) begins a transaction and takes ``TABLOCKX, HOLDLOCK`` on the table(s):
   in-flight writers finish first, new ones wait.
2. B sets ``SNAPSHOT`` isolation, begins a transaction and reads ``cdc.change_tables``: the
   snapshot's version is fixed at that first read (not at ``BEGIN``), while no writer on the
   locked tables can be in flight.
3. B's ``SAVE TRANSACTION`` writes a log record; ``sys.dm_tran_database_transactions`` then gives
   its LSN (numeric(25,0)). Every commit B sees on the locked tables is below it, every commit it
   does not see is above it: that LSN is the snapshot LSN S.
4. A rolls back (writers resume); B reads the rows at leisure and commits.

Changes ``(S, …]`` are applied afterwards; reading them waits until max LSN >= S.

**Fuzzy**, lock-free (no snapshot isolation, or no table lock wanted), DBLog's watermarks: a
low watermark L taken from the log before the read, the rows read with read committed (one
statement, no transaction, no table lock), a high watermark H taken from the log after it
(:func:`~.watermarks.log_position`: a savepoint's LSN, not the max LSN, which lags the log by
the capture latency). Every commit the read missed is above L, every commit it saw is below H:
the rows mix versions between L and H, so the changes ``(L, …]`` are replayed over them as
idempotent upserts/deletes by key — "latest version wins" — and the result is the table at any
LSN from H on. This needs a key: a keyless table without snapshot isolation is refused
(:class:`~.errors.KeylessTableNeedsSnapshotIsolation`).

In both modes the result says: apply changes above ``replay_from``; the mirror is consistent at
``lsn`` once it has. Exact: ``replay_from == lsn == S``. Fuzzy: ``replay_from = L``,
``lsn = H``.

Large tables are read in key chunks ``(after_key, upto_key]`` (:class:`KeyRange`), each chunk in
key order, so Spark executors can read them in parallel, each with its own snapshot (exact: its
own S; fuzzy: its own L and H). A table's snapshot then stands between the lowest L (or S) of
its chunks, where the replay starts, and the highest H (or S), from which it is consistent.

https://learn.microsoft.com/en-us/sql/t-sql/statements/set-transaction-isolation-level-transact-sql
https://learn.microsoft.com/en-us/sql/t-sql/language-elements/save-transaction-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-dynamic-management-views/sys-dm-tran-database-transactions-transact-sql
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import pyarrow as pa

from cdc_assets.lsn import Lsn

from .arrow_types import ArrowSchema, arrow_schema, read_record_batches
from .catalog import CaptureInstance, database_info
from .column_masks import masked_select
from .connection import ConnectionFactory
from .dbapi import DbapiConnection, execute, fetch_value
from .errors import KeylessTableNeedsSnapshotIsolation, SnapshotIsolationNotAllowed, SqlServerError
from .quoting import quote_name, quote_table
from .watermarks import TRANSACTION_LSN_QUERY, log_position

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_MS",
    "ExactSnapshot",
    "KeyRange",
    "SnapshotMode",
    "SnapshotRead",
    "SnapshotResult",
    "begin_exact_snapshot",
    "choose_mode",
    "count_rows",
    "key_condition",
    "read_rows",
    "snapshot_schema",
    "snapshot_table",
]

SnapshotMode = Literal["exact", "fuzzy"]
DEFAULT_LOCK_TIMEOUT_MS = 30_000
DEFAULT_BATCH_ROWS = 10_000

# https://learn.microsoft.com/en-us/sql/t-sql/functions/count-big-transact-sql
COUNT_ROWS_QUERY = "SELECT COUNT_BIG(*) FROM {table}"


def count_rows(conn: DbapiConnection, schema: str, table: str) -> int:
    """The rows of ``[schema].[table]`` as this connection sees them (inside an exact snapshot:
    at its LSN)."""
    return int(fetch_value(conn, COUNT_ROWS_QUERY.format(table=quote_table(schema, table))) or 0)


@dataclass(frozen=True)
class SnapshotResult:
    """Where a snapshot stands in the LSN chain.

    Apply the changes above ``replay_from``; the table is consistent at ``lsn`` once they are.
    """

    lsn: Lsn
    mode: SnapshotMode
    replay_from: Lsn
    rows: int = 0


@dataclass(frozen=True)
class KeyRange:
    """A chunk of a table by key: ``after < key <= upto`` in the key's order (None: unbounded).

    Bounds are key tuples in the capture instance's key column order; take them from the table
    itself (e.g. sampled keys) so they compare with the server's collation.
    """

    after: tuple[Any, ...] | None = None
    upto: tuple[Any, ...] | None = None


def snapshot_schema(instance: CaptureInstance) -> ArrowSchema:
    """The Arrow schema of snapshot rows: the captured columns, in capture order."""
    return arrow_schema(instance.columns)


def _compare(keys: Sequence[str], values: Sequence[Any], op: str, last: str) -> tuple[str, list]:
    """Lexicographic ``(k1, …, kn) op (v1, …, vn)`` without row constructors (T-SQL has none):
    ``k1 op v1 OR (k1 = v1 AND k2 op v2) OR …``, the last position compared with ``last``."""
    if len(values) != len(keys):
        raise ValueError(f"a key bound has {len(keys)} values ({', '.join(keys)}); got {values!r}")
    terms: list[str] = []
    params: list[Any] = []
    for i, key in enumerate(keys):
        parts = [f"{quote_name(k)} = ?" for k in keys[:i]]
        parts.append(f"{quote_name(key)} {last if i == len(keys) - 1 else op} ?")
        params.extend(values[: i + 1])
        terms.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(terms) + ")", params


def key_condition(keys: Sequence[str], after: Sequence[Any]) -> tuple[str, list]:
    """``(k1, …, kn) > (v1, …, vn)`` in key order, as T-SQL text and its parameters."""
    return _compare(keys, after, ">", ">")


# The rows of a table (same statement on both connections of either mode), e.g.
# SELECT [id], [name] FROM [dbo].[orders] WHERE (([id] > ?)) ORDER BY [id]
SNAPSHOT_ROWS_QUERY = "SELECT {columns} FROM {table}{where}{order_by}"


def rows_query(instance: CaptureInstance, key_range: KeyRange | None) -> tuple[str, list[Any]]:
    """The snapshot ``SELECT`` of ``instance``'s captured columns (masked ones as
    :func:`~.column_masks.masked_select` has them), in key order, with the chunk's key predicate
    and its parameters."""
    keys = instance.key_columns
    conditions: list[str] = []
    params: list[Any] = []
    if key_range is not None and (key_range.after is not None or key_range.upto is not None):
        if not keys:
            raise ValueError(f"{instance.name}: a table without key cannot be read in key ranges")
        if key_range.after is not None:
            sql, values = _compare(keys, key_range.after, ">", ">")
            conditions.append(sql)
            params.extend(values)
        if key_range.upto is not None:
            sql, values = _compare(keys, key_range.upto, "<", "<=")
            conditions.append(sql)
            params.extend(values)
    query = SNAPSHOT_ROWS_QUERY.format(
        columns=", ".join(masked_select(c, quote_name(c.name)) for c in instance.columns),
        table=quote_table(instance.source_schema, instance.source_table),
        where=" WHERE " + " AND ".join(conditions) if conditions else "",
        order_by=" ORDER BY " + ", ".join(quote_name(k) for k in keys) if keys else "",
    )
    return query, params


def read_rows(
    conn: DbapiConnection,
    instance: CaptureInstance,
    *,
    key_range: KeyRange | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Stream the table's rows (captured columns, key order) on ``conn`` in record batches.

    Consistency is the caller's: run it inside an exact snapshot's transaction, or between the
    two max-LSN reads of a fuzzy snapshot.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1; got {batch_rows}")
    schema = snapshot_schema(instance)
    sql, params = rows_query(instance, key_range)
    cursor = execute(conn, sql, *params)
    yield from read_record_batches(cursor, schema, batch_rows)


# -- exact snapshot ---------------------------------------------------------------------------

# Connection A: lock the tables; the time-out keeps a queued exclusive lock from stalling the
# source for long (a waiting TABLOCKX blocks later readers too).
# https://learn.microsoft.com/en-us/sql/t-sql/statements/set-lock-timeout-transact-sql
LOCK_TIMEOUT_STATEMENT = "SET LOCK_TIMEOUT {milliseconds}"
READ_COMMITTED_STATEMENT = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
BEGIN_STATEMENT = "BEGIN TRANSACTION"
# https://learn.microsoft.com/en-us/sql/t-sql/queries/hints-transact-sql-table
LOCK_TABLE_QUERY = "SELECT TOP (0) 1 AS locked FROM {table} WITH (TABLOCKX, HOLDLOCK)"
ROLLBACK_STATEMENT = "ROLLBACK TRANSACTION"

# Connection B: fix the SNAPSHOT version with a first read, log a savepoint, read its LSN.
SNAPSHOT_ISOLATION_STATEMENT = "SET TRANSACTION ISOLATION LEVEL SNAPSHOT"
FIX_VERSION_QUERY = "SELECT TOP (1) object_id FROM cdc.change_tables"
SAVEPOINT_STATEMENT = "SAVE TRANSACTION cdc_assets_snapshot"
# https://learn.microsoft.com/en-us/sql/relational-databases/system-dynamic-management-views/sys-dm-tran-database-transactions-transact-sql
SNAPSHOT_LSN_QUERY = TRANSACTION_LSN_QUERY
COMMIT_STATEMENT = "COMMIT TRANSACTION"


def _quietly(conn: DbapiConnection, *statements: str) -> None:
    """Best-effort clean-up statements (after an error already being raised)."""
    for statement in statements:
        with contextlib.suppress(Exception):
            execute(conn, statement).close()


def _close(conn: DbapiConnection) -> None:
    with contextlib.suppress(Exception):
        conn.close()


class ExactSnapshot:
    """Connection B's open SNAPSHOT transaction, consistent at :attr:`lsn` for the tables locked
    when it began. Read tables one after another with :meth:`read`, then :meth:`close` (or use
    it as a context manager). One read at a time: a connection streams one result."""

    def __init__(self, conn: DbapiConnection, lsn: Lsn) -> None:
        self.conn = conn
        self.lsn = lsn
        self._open = True

    def read(
        self,
        instance: CaptureInstance,
        *,
        key_range: KeyRange | None = None,
        batch_rows: int = DEFAULT_BATCH_ROWS,
    ) -> Iterator[pa.RecordBatch]:
        if not self._open:
            raise RuntimeError("the exact snapshot is closed")
        return read_rows(self.conn, instance, key_range=key_range, batch_rows=batch_rows)

    def close(self, *, commit: bool = True) -> None:
        """End B's transaction (commit: it only read) and close the connection."""
        if not self._open:
            return
        self._open = False
        try:
            if commit:
                execute(self.conn, COMMIT_STATEMENT).close()
                execute(self.conn, READ_COMMITTED_STATEMENT).close()
            else:
                _quietly(self.conn, ROLLBACK_STATEMENT)
        finally:
            _close(self.conn)

    def __enter__(self) -> ExactSnapshot:
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self.close(commit=exc_type is None)


def begin_exact_snapshot(
    factory: ConnectionFactory,
    instances: Sequence[CaptureInstance],
    *,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
) -> ExactSnapshot:
    """Steps 1-4 of the module doc for ``instances``' source tables (one S for all of them).

    Raises :class:`~.errors.SnapshotIsolationNotAllowed` without ``ALLOW_SNAPSHOT_ISOLATION``
    and :class:`~.errors.LockTimeout` when the tables stay locked longer than the time-out.
    """
    if not instances:
        raise ValueError("an exact snapshot needs at least one table")
    if not isinstance(lock_timeout_ms, int) or lock_timeout_ms < -1:
        raise ValueError(
            f"lock_timeout_ms is an int >= -1 (-1: wait forever); got {lock_timeout_ms}"
        )
    # Lock in one fixed order, so two snapshots of overlapping table sets cannot deadlock.
    tables = sorted({quote_table(i.source_schema, i.source_table) for i in instances})
    a = factory.connect(autocommit=True)
    try:
        if not database_info(a).snapshot_isolation:
            raise SnapshotIsolationNotAllowed(
                "The database does not allow snapshot isolation (ALLOW_SNAPSHOT_ISOLATION OFF), "
                "so an exact snapshot cannot be taken."
            )
        execute(a, LOCK_TIMEOUT_STATEMENT.format(milliseconds=int(lock_timeout_ms))).close()
        execute(a, READ_COMMITTED_STATEMENT).close()
        execute(a, BEGIN_STATEMENT).close()
        try:
            for table in tables:
                execute(a, LOCK_TABLE_QUERY.format(table=table)).close()
            b = factory.connect(autocommit=True)
            try:
                execute(b, SNAPSHOT_ISOLATION_STATEMENT).close()
                execute(b, BEGIN_STATEMENT).close()
                fetch_value(b, FIX_VERSION_QUERY)
                execute(b, SAVEPOINT_STATEMENT).close()
                value = fetch_value(b, SNAPSHOT_LSN_QUERY)
                if value is None:
                    raise SqlServerError(
                        "sys.dm_tran_database_transactions returned no log position for the "
                        "snapshot transaction.",
                        hint="The login needs VIEW SERVER STATE to read the snapshot LSN.",
                    )
                lsn = Lsn.from_numeric(Decimal(value))
            except BaseException:
                _quietly(b, ROLLBACK_STATEMENT, READ_COMMITTED_STATEMENT)
                _close(b)
                raise
        finally:
            _quietly(a, ROLLBACK_STATEMENT)
    finally:
        _close(a)
    return ExactSnapshot(b, lsn)


# -- one table, either mode ---------------------------------------------------------------------


def choose_mode(
    conn: DbapiConnection, instance: CaptureInstance, mode: SnapshotMode | Literal["auto"]
) -> SnapshotMode:
    """``auto``: exact with snapshot isolation, else fuzzy. Fuzzy needs a key."""
    table = quote_table(instance.source_schema, instance.source_table)
    if mode == "auto":
        mode = "exact" if database_info(conn).snapshot_isolation else "fuzzy"
    if mode == "fuzzy" and not instance.key_columns:
        raise KeylessTableNeedsSnapshotIsolation(table)
    if mode not in ("exact", "fuzzy"):
        raise ValueError(f"snapshot mode is 'auto', 'exact' or 'fuzzy'; got {mode!r}")
    return mode


class SnapshotRead:
    """One table's snapshot: iterate for record batches; :attr:`result` once all are read.

    Close it (or use ``with``) if the read is abandoned: it holds a connection and, in exact
    mode, an open SNAPSHOT transaction.
    """

    def __init__(
        self,
        *,
        instance: CaptureInstance,
        mode: SnapshotMode,
        conn: DbapiConnection,
        replay_from: Lsn,
        exact: ExactSnapshot | None,
        key_range: KeyRange | None,
        batch_rows: int,
    ) -> None:
        self.instance = instance
        self.mode = mode
        self.replay_from = replay_from
        self.schema = snapshot_schema(instance)
        self._conn = conn
        self._exact = exact
        self._key_range = key_range
        self._batch_rows = batch_rows
        self._result: SnapshotResult | None = None
        self._started = False
        self._closed = False

    @property
    def result(self) -> SnapshotResult:
        if self._result is None:
            raise RuntimeError("the snapshot's result is known once every batch has been read")
        return self._result

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise RuntimeError("a snapshot can be iterated once")
        self._started = True
        rows = 0
        try:
            for batch in read_rows(
                self._conn, self.instance, key_range=self._key_range, batch_rows=self._batch_rows
            ):
                rows += batch.num_rows
                yield batch
            if self._exact is not None:
                self._exact.close(commit=True)
                lsn = self._exact.lsn
            else:
                lsn = log_position(self._conn)  # H: above every commit the read saw
                _close(self._conn)
            self._closed = True
            self._result = SnapshotResult(lsn, self.mode, self.replay_from, rows)
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._exact is not None:
            self._exact.close(commit=False)
        else:
            _close(self._conn)

    def __enter__(self) -> SnapshotRead:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def snapshot_table(
    factory: ConnectionFactory,
    instance: CaptureInstance,
    *,
    mode: SnapshotMode | Literal["auto"] = "auto",
    key_range: KeyRange | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS,
) -> SnapshotRead:
    """Start a snapshot of ``instance``'s source table (or one key chunk of it).

    Exact mode fixes S before returning (the table lock is already released); fuzzy mode takes
    the low watermark now and the high one when the last batch has been read.
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1; got {batch_rows}")
    conn = factory.connect(autocommit=True)
    try:
        chosen = choose_mode(conn, instance, mode)
        if chosen == "fuzzy":
            replay_from = log_position(conn)  # L: below every commit the read may miss
            return SnapshotRead(
                instance=instance,
                mode="fuzzy",
                conn=conn,
                replay_from=replay_from,
                exact=None,
                key_range=key_range,
                batch_rows=batch_rows,
            )
    except BaseException:
        _close(conn)
        raise
    _close(conn)
    exact = begin_exact_snapshot(factory, [instance], lock_timeout_ms=lock_timeout_ms)
    return SnapshotRead(
        instance=instance,
        mode="exact",
        conn=exact.conn,
        replay_from=exact.lsn,
        exact=exact,
        key_range=key_range,
        batch_rows=batch_rows,
    )
