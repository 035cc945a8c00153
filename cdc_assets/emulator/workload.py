"""A deterministic OLTP workload for a CDC source, sent as plain T-SQL over any DB-API connection.

:func:`create_demo_database` enables CDC, creates the demo tables of :mod:`.demo_schema`, enables
them for capture and loads initial rows. :class:`Workload` then runs realistic transactions:
multi-row inserts, updates of non-key columns, deletes, orders with their lines in one
transaction, primary-key updates (cascaded to child rows), delete + re-insert of one key,
insert/update/delete of one row inside one transaction, duplicate rows in the keyless table,
occasional rollbacks and rare bursts (one large transaction).

Everything goes through ``cursor.execute`` with the statement shapes of the emulator's
``CONTRACT.md``, so the same code drives the emulator (``cdc_assets.emulator.connect``) and a real
SQL Server (pyodbc). Values are parameters, identifiers are quoted. A :class:`Workload` keeps an
in-memory model of what every table must contain, in the Python types pyodbc returns
(``char(n)`` padded, ``binary(n)`` zero-filled, ``Decimal`` with the column's scale, naive
datetimes with microseconds, tz-aware datetimeoffsets, upper-case GUID strings), so tests compare
the source (and anything replayed from its change tables) with :meth:`Workload.expected_rows`.

The same seed on the same starting database gives the same statements: all choices come from one
``random.Random(seed)`` and the model is iterated in insertion order only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from random import Random
from typing import Any

from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.quoting import quote_name

from .demo_schema import DEMO_TABLES, INTEGER_RANGES, ColumnDef, TableDef

__all__ = [
    "DEMO_TABLES",
    "TRANSACTION_KINDS",
    "StepResult",
    "Workload",
    "WorkloadError",
    "WorkloadStats",
    "create_captured_tables",
    "create_demo_database",
    "read_rows",
    "small_tables",
]

Row = tuple[Any, ...]
Key = tuple[Any, ...]

MAX_PARAMS = 2000  # SQL Server allows 2100 parameters per request
MAX_VALUES_ROWS = 1000  # and 1000 row constructors per VALUES clause
NULL_RATE = 0.12


class WorkloadError(RuntimeError):
    """The database did something the model did not expect (e.g. a wrong row count)."""


# -- value generation ------------------------------------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ASCII_WORDS = _words(
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu order stock "
    "ship invoice refund priority express standard gift wrap fragile sample bulk"
)
_UNICODE_WORDS = _words(
    "naïve café Straße Ærø smørbrød Ångström crème brûlée façade jalapeño Zoë Łódź "
    "東京 大阪 注文 商品 Привет заказ Москва مرحبا طلب Ελλάδα παραγγελία 서울 주문 "
    "Nguyễn Việt ₹100 €5 ½ ✓ ★ ☃"
)
_SUPPLEMENTARY = ("😀", "🚚", "📦", "𝄞", "🇩🇪")
_FIRST_NAMES = _words(
    "Anna Zoë Björn José Łukasz Søren Ólafur Chloé Dmitri Aiko Fatima Ngozi Priya Mateo "
    "Jürgen Inès Siobhán Ümit Ярослав Μαρία 太郎 민준 محمد"
)
_LAST_NAMES = _words(
    "Müller Øberg García Nowak Dubois Tanaka Okafor Sharma Rossi O'Brien Ivanova Yılmaz "
    "Nguyễn Kowalski Петров Παπαδόπουλος 山田 김 علي"
)
_COUNTRIES = ("DE", "US", "FR", "JP", "BR", "IN", "SE", "ZA", "PL", "KR", "EG", "GR")
_STATUSES = ("new", "paid", "picking", "shipped", "delivered", "cancelled", "returned")
_CHANNELS = ("web", "app", "store", "phone", "partner")
_OFFSETS = (0, 60, 120, -300, -480, 330, 345, 540, -210, 600, -600, 840, -720)
_HOSTS = ("web-01", "web-02", "api-ä1", "worker-東京", "batch")


def _ascii_text(rng: Random, limit: int) -> str:
    words: list[str] = []
    size = rng.randint(1, max(1, min(limit, 60)))
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(_ASCII_WORDS))
    return " ".join(words)[:limit].rstrip()


def _unicode_text(rng: Random, limit: int, *, supplementary: bool) -> str:
    words: list[str] = []
    size = rng.randint(1, max(1, min(limit, 80)))
    while sum(len(w) + 1 for w in words) < size:
        pick = rng.random()
        if supplementary and pick < 0.05:
            words.append(rng.choice(_SUPPLEMENTARY))
        elif pick < 0.5:
            words.append(rng.choice(_UNICODE_WORDS))
        else:
            words.append(rng.choice(_ASCII_WORDS))
    return " ".join(words)[:limit].rstrip()


def _xml(rng: Random) -> str:
    kind = rng.choice(_STATUSES)
    note = _unicode_text(rng, 40, supplementary=False)
    return (
        f'<doc kind="{kind}"><id>{rng.randint(1, 10**6)}</id>'
        f"<note>{note}</note><flag>{rng.choice(('true', 'false'))}</flag></doc>"
    )


def _truncate_micro(micro: int, digits: int) -> int:
    if digits >= 6:
        return micro
    step = 10 ** (6 - digits)
    return micro // step * step


def _random_datetime(rng: Random, start_year: int, end_year: int) -> dt.datetime:
    start = dt.datetime(start_year, 1, 1)
    span = (dt.datetime(end_year, 12, 31) - start).days
    return start + dt.timedelta(
        days=rng.randint(0, span),
        seconds=rng.randint(0, 86399),
        microseconds=rng.randint(0, 10**6 - 1),
    )


def _decimal(rng: Random, precision: int, scale: int) -> Decimal:
    int_digits = precision - scale
    if rng.random() < 0.03:  # the largest value the type holds
        unscaled = 10**precision - 1
    else:
        used = rng.randint(0, min(int_digits, 9))
        unscaled = rng.randint(0, 10 ** (used + scale) - 1)
    if rng.random() < 0.2:
        unscaled = -unscaled
    return Decimal(f"{unscaled}E-{scale}")  # exact: scaleb would round to 28 digits


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def generate_value(rng: Random, column: ColumnDef, *, allow_null: bool = True) -> Any:
    """A random value for ``column`` in the form pyodbc returns it (``None`` for some NULLs)."""
    if allow_null and column.nullable and rng.random() < NULL_RATE:
        return None
    base = column.base_type
    hint = column.hint
    if base in INTEGER_RANGES:
        low, high = INTEGER_RANGES[base]
        if hint == "quantity":
            return rng.randint(1, 20)
        roll = rng.random()
        if roll < 0.03:
            return rng.choice((low, high))
        if roll < 0.6:
            return rng.randint(max(low, 0), min(high, 1000))
        return rng.randint(max(low, -(10**6)), min(high, 10**9))
    if base == "bit":
        return rng.random() < 0.5
    if base in ("decimal", "numeric"):
        return _decimal(rng, column.precision, column.scale)
    if base in ("money", "smallmoney"):
        high = 2**63 - 1 if base == "money" else 2**31 - 1
        roll = rng.random()
        if roll < 0.03:
            unscaled = rng.choice((high, -high - 1))
        else:
            unscaled = rng.randint(0, min(high, 10**9))
            unscaled = -unscaled if roll > 0.9 else unscaled
        return Decimal(f"{unscaled}E-4")
    if base == "float":
        roll = rng.random()
        if roll < 0.05:
            return rng.choice((0.0, 1e-300, -2.5e300, 1.0000000000000002))
        if roll < 0.3:
            return rng.uniform(-1.0, 1.0) * 10 ** rng.randint(-12, 15)
        return rng.uniform(-1e6, 1e6)
    if base == "real":
        return _float32(rng.uniform(-1e4, 1e4) if rng.random() < 0.9 else rng.uniform(-1, 1))
    if base in ("char", "varchar", "text"):
        return _ascii_string(rng, column)
    if base in ("nchar", "nvarchar", "ntext"):
        return _unicode_string(rng, column)
    if base in ("binary", "varbinary"):
        length = column.length
        if length is None:
            size = 9000 if rng.random() < 0.02 else rng.randint(0, 512)
        elif base == "binary":
            size = length if rng.random() < 0.8 else rng.randint(0, length)
        else:
            size = rng.randint(0, length)
        data = rng.randbytes(size)
        return data.ljust(length, b"\x00") if base == "binary" and length else data
    if base == "uniqueidentifier":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
    if base == "xml":
        return _xml(rng)
    return _temporal(rng, column)


def _ascii_string(rng: Random, column: ColumnDef) -> str:
    base, length, hint = column.base_type, column.length, column.hint
    limit = length if length is not None else 200
    if hint == "email":
        value = f"{rng.choice(_ASCII_WORDS)}.{rng.choice(_ASCII_WORDS)}{rng.randint(1, 999)}"
        value = f"{value}@example.{rng.choice(('com', 'org', 'de', 'jp'))}"
    elif hint == "country":
        value = rng.choice(_COUNTRIES)
    elif hint == "status":
        value = rng.choice(_STATUSES)
    elif hint == "sku":
        value = f"SKU-{rng.getrandbits(32):08X}"
    elif base == "varchar" and column.name == "channel":
        value = rng.choice(_CHANNELS)
    elif length is None and rng.random() < 0.03:
        value = _ascii_text(rng, 60) * 150  # a LOB above 8000 bytes
    elif rng.random() < 0.03:
        value = ""
    else:
        value = _ascii_text(rng, limit)
    value = value[:limit]
    if base == "char" and length:
        value = value.ljust(length)
    return value


def _unicode_string(rng: Random, column: ColumnDef) -> str:
    base, length, hint = column.base_type, column.length, column.hint
    if hint == "name":
        value = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
    elif column.name == "source_host":
        value = rng.choice(_HOSTS)
    elif length is None and rng.random() < 0.03:
        value = _unicode_text(rng, 80, supplementary=False) * 60  # a LOB above 4000 characters
    else:
        value = _unicode_text(rng, length or 300, supplementary=length is None)
    if length is not None:
        value = value[:length]
    if base == "nchar" and length:
        value = value.ljust(length)
    return value


def _temporal(rng: Random, column: ColumnDef) -> Any:
    base, digits = column.base_type, column.scale
    if base == "date":
        if rng.random() < 0.02:
            return rng.choice((dt.date(1, 1, 1), dt.date(9999, 12, 31)))
        return _random_datetime(rng, 1930, 2030).date()
    if base == "time":
        moment = _random_datetime(rng, 2000, 2000)
        return moment.time().replace(microsecond=_truncate_micro(moment.microsecond, digits))
    if base == "datetime2":
        if rng.random() < 0.02:
            extremes = (dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
            moment = rng.choice(extremes)
        else:
            moment = _random_datetime(rng, 1990, 2035)
        return moment.replace(microsecond=_truncate_micro(moment.microsecond, digits))
    if base == "datetime":
        moment = _random_datetime(rng, 1990, 2035)
        millis = rng.randint(0, 99) * 10 + rng.choice((0, 3, 7))  # 1/300 s ticks round-trip
        return moment.replace(microsecond=millis * 1000)
    if base == "smalldatetime":
        moment = _random_datetime(rng, 1990, 2078)
        return moment.replace(second=0, microsecond=0)
    if base == "datetimeoffset":
        moment = _random_datetime(rng, 1980, 2035)
        offset = dt.timezone(dt.timedelta(minutes=rng.choice(_OFFSETS)))
        micro = _truncate_micro(moment.microsecond, digits)
        return moment.replace(microsecond=micro, tzinfo=offset)
    raise ValueError(f"no value generator for SQL Server type {column.type!r}")


def to_parameter(column: ColumnDef, value: Any) -> Any:
    """The parameter sent for ``value``: datetimeoffset and time go as ISO text.

    pyodbc binds neither tz-aware datetimes nor fractional times faithfully, and SQL Server
    converts ``'2024-01-02 03:04:05.1234560+05:30'`` exactly; the emulator accepts the same text.
    """
    if value is None:
        return None
    base = column.base_type
    if base == "datetimeoffset":
        offset = value.utcoffset() or dt.timedelta(0)
        minutes = int(offset.total_seconds()) // 60
        sign = "-" if minutes < 0 else "+"
        hours, mins = divmod(abs(minutes), 60)
        return (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}0"
            f"{sign}{hours:02d}:{mins:02d}"
        )
    if base == "time":
        return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}0"
    return value


# -- the model -------------------------------------------------------------------------------


class _KeySet:
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
class _TableState:
    table: TableDef
    rows: dict[Key, list[Row]] = field(default_factory=dict)
    keys: _KeySet = field(default_factory=_KeySet)
    children: dict[Key, dict[Key, None]] = field(default_factory=dict)  # on a child: by parent
    next_int: int = 1
    locator_idx: tuple[int, ...] = ()
    parent_idx: tuple[int, ...] = ()
    own_key: tuple[str, ...] = ()

    def parent_key(self, row: Row) -> Key:
        return tuple(row[i] for i in self.parent_idx)

    def key_of(self, row: Row) -> Key:
        return tuple(row[i] for i in self.locator_idx)


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


def _ordered(tables: Sequence[TableDef]) -> list[TableDef]:
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


class Workload:
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
        self.conn = conn
        # A table holding more rows than this gets a "trim" transaction (deletes) instead of a
        # random one, so a workload left running keeps the tables' sizes bounded.
        self.max_rows = max_rows
        self.seed = seed
        self.rng = Random(seed)
        self.tables = tuple(_ordered(tables))
        self.burst_rows = burst_rows
        self.stats = WorkloadStats()
        self.statements: list[tuple[str, tuple[Any, ...]]] | None = [] if record else None
        self._journal: list[tuple[_TableState, Key, list[Row] | None]] | None = None
        self._pending = Counter[str]()
        self._step_statements = 0
        if getattr(conn, "autocommit", True) is not True:
            conn.autocommit = True
        self._cursor = conn.cursor()
        self._states: dict[str, _TableState] = {}
        for table in self.tables:
            self._states[table.full_name] = self._new_state(table)
        self._children: dict[str, list[_TableState]] = {}
        for state in self._states.values():
            parent = state.table.parent
            if parent is not None and parent.table in self._states:
                self._children.setdefault(parent.table, []).append(state)
        if load:
            for state in self._states.values():
                for row in read_rows(conn, state.table):
                    self._put_rows(
                        state, state.key_of(row), [*state.rows.get(state.key_of(row), []), row]
                    )
                self._init_counter(state)

    # -- model ----------------------------------------------------------------------------
    def _new_state(self, table: TableDef) -> _TableState:
        index = table.column_index
        parent_idx: tuple[int, ...] = ()
        parent_cols: set[str] = set()
        if table.parent is not None:
            parent_idx = tuple(index[child] for child, _ in table.parent.columns)
            parent_cols = {child for child, _ in table.parent.columns}
        return _TableState(
            table=table,
            locator_idx=tuple(index[c] for c in table.locator),
            parent_idx=parent_idx,
            own_key=tuple(c for c in table.locator if c not in parent_cols),
        )

    def _init_counter(self, state: _TableState) -> None:
        highest = 0
        for name in state.own_key:
            column = state.table.column(name)
            if column.base_type in INTEGER_RANGES:
                i = state.table.column_index[name]
                for rows in state.rows.values():
                    highest = max(highest, int(rows[0][i]))
        state.next_int = highest + 1

    def _put_rows(self, state: _TableState, key: Key, rows: list[Row] | None) -> None:
        """Set the rows at ``key`` (None or [] removes it); journaled inside a transaction."""
        old = state.rows.get(key)
        if self._journal is not None:
            self._journal.append((state, key, None if old is None else list(old)))
        self._apply(state, key, rows or None, old)

    def _apply(
        self, state: _TableState, key: Key, rows: list[Row] | None, old: list[Row] | None
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

    # -- SQL ------------------------------------------------------------------------------
    def _exec(self, sql: str, params: Sequence[Any] = (), expect: int | None = None) -> None:
        args = tuple(params)
        if self.statements is not None:
            self.statements.append((sql, args))
        self._step_statements += 1
        if args:
            self._cursor.execute(sql, args)
        else:
            self._cursor.execute(sql)
        if expect is not None:
            count = getattr(self._cursor, "rowcount", -1)
            if count is not None and count >= 0 and count != expect:
                raise WorkloadError(f"{sql!r} changed {count} rows; the model expected {expect}")

    def _insert(self, state: _TableState, rows: list[Row]) -> None:
        if not rows:
            return
        table = state.table
        columns = table.columns
        names = ", ".join(c.quoted for c in columns)
        marks = "(" + ", ".join("?" for _ in columns) + ")"
        per_statement = max(1, min(MAX_VALUES_ROWS, MAX_PARAMS // len(columns)))
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [
                to_parameter(c, v) for row in chunk for c, v in zip(columns, row, strict=True)
            ]
            self._exec(
                f"INSERT INTO {table.quoted} ({names}) VALUES {', '.join([marks] * len(chunk))}",
                params,
                expect=len(chunk),
            )
        for row in rows:
            key = state.key_of(row)
            self._put_rows(state, key, [*state.rows.get(key, []), row])
        self._pending["inserted"] += len(rows)

    def _where(
        self, table: TableDef, names: Sequence[str], values: Sequence[Any]
    ) -> tuple[str, list[Any]]:
        text = " AND ".join(f"{quote_name(n)} = ?" for n in names)
        params = [to_parameter(table.column(n), v) for n, v in zip(names, values, strict=True)]
        return text, params

    def _update(self, state: _TableState, key: Key, changes: dict[str, Any]) -> None:
        table = state.table
        rows = state.rows[key]
        sets = ", ".join(f"{quote_name(n)} = ?" for n in changes)
        set_params = [to_parameter(table.column(n), v) for n, v in changes.items()]
        where, where_params = self._where(table, table.locator, key)
        self._exec(
            f"UPDATE {table.quoted} SET {sets} WHERE {where}",
            [*set_params, *where_params],
            expect=len(rows),
        )
        index = table.column_index
        new_rows = []
        for row in rows:
            values = list(row)
            for name, value in changes.items():
                values[index[name]] = value
            new_rows.append(tuple(values))
        new_key = state.key_of(new_rows[0])
        self._put_rows(state, key, None)
        self._put_rows(state, new_key, [*state.rows.get(new_key, []), *new_rows])
        self._pending["updated"] += len(rows)

    def _delete(self, state: _TableState, key: Key) -> None:
        """Delete the rows at ``key`` and, first, their children."""
        for child in self._children.get(state.table.full_name, []):
            self._delete_children(child, key)
        table = state.table
        where, params = self._where(table, table.locator, key)
        count = len(state.rows[key])
        self._exec(f"DELETE FROM {table.quoted} WHERE {where}", params, expect=count)
        self._put_rows(state, key, None)
        self._pending["deleted"] += count

    def _delete_children(self, child: _TableState, parent_key: Key) -> None:
        keys = list(child.children.get(parent_key, {}))
        if not keys:
            return
        assert child.table.parent is not None
        names = [name for name, _ in child.table.parent.columns]
        where, params = self._where(child.table, names, parent_key)
        count = sum(len(child.rows[k]) for k in keys)
        self._exec(f"DELETE FROM {child.table.quoted} WHERE {where}", params, expect=count)
        for key in keys:
            self._put_rows(child, key, None)
        self._pending["deleted"] += count

    # -- rows and keys --------------------------------------------------------------------
    def _fresh_key_value(
        self, state: _TableState, name: str, parent_key: Key | None, pending: Sequence[Row] = ()
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
        self, state: _TableState, parent_key: Key | None = None, pending: Sequence[Row] = ()
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
        self, child: _TableState, parent_keys: Sequence[Key], pending: Sequence[Row] = ()
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

    def _changes(self, state: _TableState) -> dict[str, Any]:
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
    ) -> _TableState | None:
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

    def _parent_of(self, child: _TableState) -> _TableState | None:
        assert child.table.parent is not None
        return self._states.get(child.table.parent.table)

    # -- operations -----------------------------------------------------------------------
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

    def _rekey_children(self, child: _TableState, old_parent: Key, new_parent: Key) -> None:
        keys = list(child.children.get(old_parent, {}))
        if not keys:
            return
        assert child.table.parent is not None
        names = [name for name, _ in child.table.parent.columns]
        sets = ", ".join(f"{quote_name(n)} = ?" for n in names)
        set_params = [
            to_parameter(child.table.column(n), v) for n, v in zip(names, new_parent, strict=True)
        ]
        where, params = self._where(child.table, names, old_parent)
        count = sum(len(child.rows[k]) for k in keys)
        self._exec(
            f"UPDATE {child.table.quoted} SET {sets} WHERE {where}",
            [*set_params, *params],
            expect=count,
        )
        moved: list[tuple[Key, list[Row]]] = []
        for key in keys:
            rows = child.rows[key]
            new_rows = []
            for row in rows:
                values = list(row)
                for i, value in zip(child.parent_idx, new_parent, strict=True):
                    values[i] = value
                new_rows.append(tuple(values))
            self._put_rows(child, key, None)
            moved.append((child.key_of(new_rows[0]), new_rows))
        for key, rows in moved:
            self._put_rows(child, key, rows)
        self._pending["updated"] += count

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

    def _over_full(self) -> _TableState | None:
        """The fullest table holding more than ``max_rows`` rows, if any."""
        limit = self.max_rows
        if limit is None:
            return None
        counts = [(sum(len(r) for r in s.rows.values()), s) for s in self._states.values()]
        full = [(n, s) for n, s in counts if n > limit and s.keys]
        return max(full, key=lambda item: item[0])[1] if full else None

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


def create_demo_database(
    conn: Any,
    *,
    seed: int = 0,
    rows_per_table: int = 1000,
    tables: Sequence[TableDef] = DEMO_TABLES,
    polling_interval: int | None = 1,
    record: bool = False,
) -> Workload:
    """Enable CDC and snapshot isolation, create and enable ``tables``, load initial rows.

    Returns the :class:`Workload` that loaded the rows (its model holds them), ready to run more
    transactions with the same random stream. ``polling_interval`` (seconds) sets the capture
    job's polling (SQL Server's default is 5); None leaves it alone.
    """
    if getattr(conn, "autocommit", True) is not True:
        conn.autocommit = True
    cdc_admin.enable_database(conn)
    cursor = conn.cursor()
    try:
        cursor.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        ordered = _ordered(tables)
        for table in ordered:
            cursor.execute(table.create_sql())
    finally:
        cursor.close()
    for table in ordered:
        cdc_admin.run(conn, table.enable_cdc_statement())
    if polling_interval is not None:  # sp_cdc_change_job takes effect when the job restarts
        cdc_admin.change_job(conn, "capture", polling_interval=int(polling_interval))
        cdc_admin.restart_job(conn, "capture")
    workload = Workload(conn, seed=seed, tables=ordered, load=False, record=record)
    workload.seed_rows(rows_per_table)
    return workload


def small_tables(count: int, *, prefix: str = "t", schema: str = "dbo") -> tuple[TableDef, ...]:
    """``count`` small tables ``<schema>.<prefix>0000`` ...: ``id`` (key), ``name``, ``qty``."""
    width = max(4, len(str(count - 1)))
    columns = (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("name", "nvarchar(50)", hint="name"),
        ColumnDef("qty", "int", hint="quantity"),
    )
    return tuple(
        TableDef(schema, f"{prefix}{i:0{width}d}", columns, primary_key=("id",))
        for i in range(count)
    )


def create_captured_tables(
    conn: Any,
    count: int,
    *,
    prefix: str = "t",
    schema: str = "dbo",
    rows_per_table: int = 1,
    timings: dict[str, float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[TableDef, ...]:
    """Create ``count`` small CDC-enabled tables (see :func:`small_tables`) quickly.

    Enables CDC and snapshot isolation on the database if needed, creates and enables every
    table (net changes on), then inserts ``rows_per_table`` rows per table (``id`` 1, 2, ...;
    ``qty`` = ``id``) in one transaction. Plain T-SQL: works on SQL Server too. Returns the
    table definitions (a :class:`Workload` can run on them). ``timings``, if given, receives the
    seconds of the ``create``, ``enable`` and ``rows`` steps, as measured by ``clock``.
    """
    if getattr(conn, "autocommit", True) is not True:
        conn.autocommit = True
    tables = small_tables(count, prefix=prefix, schema=schema)
    cursor = conn.cursor()
    try:
        if not cdc_admin.database_enabled(conn):
            cdc_admin.enable_database(conn)
            cursor.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        if (
            schema.lower() != "dbo"
            and not cursor.execute("SELECT 1 FROM sys.schemas WHERE name = ?", (schema,)).fetchone()
        ):
            cursor.execute(f"CREATE SCHEMA {quote_name(schema)}")
        started = clock()
        for table in tables:
            cursor.execute(table.create_sql())
        if timings is not None:
            timings["create"] = clock() - started
        started = clock()
        for table in tables:
            cdc_admin.run(conn, table.enable_cdc_statement())
        if timings is not None:
            timings["enable"] = clock() - started
        started = clock()
        if rows_per_table > 0:
            cursor.execute("BEGIN TRANSACTION")
            try:
                for table in tables:
                    for first in range(1, rows_per_table + 1, MAX_VALUES_ROWS):
                        ids = range(first, min(rows_per_table, first + MAX_VALUES_ROWS - 1) + 1)
                        values = ", ".join(f"({i}, N'row {i}', {i})" for i in ids)
                        cursor.execute(
                            f"INSERT INTO {table.quoted} ([id], [name], [qty]) VALUES {values}"
                        )
                cursor.execute("COMMIT TRANSACTION")
            except BaseException:
                with contextlib.suppress(Exception):
                    cursor.execute("ROLLBACK TRANSACTION")
                raise
        if timings is not None:
            timings["rows"] = clock() - started
    finally:
        cursor.close()
    return tables
