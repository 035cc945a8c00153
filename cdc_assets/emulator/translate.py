"""T-SQL -> SQLite: parse with sqlglot's tsql dialect, resolve names and types, rewrite, generate.

The translator never passes T-SQL text through. For each statement it

- resolves every table (``[dbo].[t]`` -> ``"dbo.t"``, ``sys.*`` views, ``cdc.*`` tables,
  ``msdb.dbo.cdc_jobs``; unknown -> error 208) and every column (unknown -> 207, ambiguous -> 209);
- types every expression, so that a parameter or literal compared with or assigned to a column is
  encoded in that column's storage form (see :mod:`.types`) and arithmetic on values whose storage
  form is not a number is refused rather than answered wrongly;
- rewrites SQL Server functions (``sys.fn_cdc_*``, ``cdc.fn_cdc_get_*_changes_<ci>``,
  ``OBJECT_ID``, ``DB_ID``, ``GETDATE``, ``LEN`` ...), ``TOP``/``OFFSET ... FETCH`` and ``+`` on
  strings;
- expands ``*`` and records the result columns (name, SQL Server type, Python type) for
  ``cursor.description``; result columns that need a converter get a SQLite alias
  ``"<n> [EMU_...]"`` so sqlite3 converts them in C (``PARSE_COLNAMES``).

Parameters are renamed markers (see :mod:`.batch`); each occurrence becomes a :class:`Slot` that
knows which caller parameter it binds and how to encode it. Anything not understood raises
``NotSupportedError`` naming the construct.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from . import errors, functions
from . import types as T
from .batch import PARAM_PREFIX
from .catalog import Catalog, Table
from .storage import quote
from .types import SqlType

_RAW_RE = re.compile(r'"__emu_raw_(\d+)"')
_SLOT_RE = re.compile(r":__emq_(\d+)")


@dataclass(frozen=True)
class Slot:
    """One ``?`` of the SQLite text: the caller's parameter it binds and its encoder."""

    param: int
    encoder: Callable[[Any], Any] | None


@dataclass(frozen=True)
class ResultColumn:
    name: str
    type: SqlType | None
    python_type: type

    def description(self) -> tuple[Any, ...]:
        t = self.type
        size = t.max_length if t is not None else None
        precision = t.sys_precision if t is not None else None
        scale = t.sys_scale if t is not None else None
        return (self.name, self.python_type, None, size, precision, scale, True)


@dataclass(frozen=True)
class Plan:
    """A translated statement.

    kind: ``query`` (rows), ``dml`` (rowcount), ``action`` (DDL, procedures: ``payload`` is a
    callable taking the session and the caller's parameters).
    """

    kind: str
    sql: str | None = None
    slots: tuple[Slot, ...] = ()
    columns: tuple[ResultColumn, ...] | None = None
    target: Table | None = None
    updates_key: bool = False
    lock: bool = False
    writes: bool = False
    payload: Any = None


@dataclass(frozen=True)
class Want:
    """The type an expression is expected to have and why (assignment or comparison)."""

    type: SqlType
    assign: bool = False


@dataclass
class Source:
    alias: str
    columns: list[tuple[str, SqlType | None]]
    table: Table | None = None
    _index: dict[str, tuple[str, SqlType | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, t in self.columns:
            self._index.setdefault(name.lower(), (name, t))

    def find(self, name: str) -> tuple[str, SqlType | None] | None:
        return self._index.get(name.lower())


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.sources: list[Source] = []
        self.ctes: dict[str, list[tuple[str, SqlType | None]]] = dict(parent.ctes) if parent else {}

    def add(self, source: Source) -> None:
        if any(s.alias.lower() == source.alias.lower() for s in self.sources):
            raise errors.server_error(
                1013,
                f'The objects "{source.alias}" in the FROM clause have the same exposed names. '
                "Use correlation names to distinguish them.",
            )
        self.sources.append(source)

    def alias(self, name: str) -> Source | None:
        scope: Scope | None = self
        while scope is not None:
            for source in scope.sources:
                if source.alias.lower() == name.lower():
                    return source
            scope = scope.parent
        return None


@dataclass
class Out:
    """A result column while translating: name, type, and the projection node."""

    name: str
    type: SqlType | None
    python_type: type


_HINTS_LOCKING = {"TABLOCKX", "XLOCK"}
_HINTS_SHARED_TABLE = {"TABLOCK"}
_HINTS_HOLD = {"HOLDLOCK", "SERIALIZABLE", "REPEATABLEREAD", "UPDLOCK"}
_HINTS_IGNORED = {
    "NOLOCK",
    "READUNCOMMITTED",
    "READCOMMITTED",
    "READCOMMITTEDLOCK",
    "ROWLOCK",
    "PAGLOCK",
    "READPAST",
    "NOWAIT",
    "NOEXPAND",
    "FORCESEEK",
    "FORCESCAN",
    "INDEX",
}

_PASSTHROUGH = (
    exp.Upper,
    exp.Lower,
    exp.Trim,
    exp.Substring,
    exp.Replace,
    exp.Abs,
    exp.Round,
    exp.Nullif,
    exp.StrPosition,
    exp.RowNumber,
    exp.Paren,
    exp.Distinct,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.Exists,
    exp.Ordered,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseNot,
)
_WINDOW_FUNCS: tuple[type[exp.Expression], ...] = tuple(
    cls
    for cls in (
        getattr(exp, name, None)
        for name in ("Rank", "DenseRank", "Lag", "Lead", "FirstValue", "LastValue", "Ntile")
    )
    if cls is not None
)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
_NOW_FUNCS = {
    "GETDATE": ("local", T.DATETIME),
    "CURRENT_TIMESTAMP": ("local", T.DATETIME),
    "SYSDATETIME": ("local", SqlType("datetime2", scale=7)),
    "GETUTCDATE": ("utc", T.DATETIME),
    "SYSUTCDATETIME": ("utc", SqlType("datetime2", scale=7)),
    "SYSDATETIMEOFFSET": ("offset", SqlType("datetimeoffset", scale=7)),
}


def family(t: SqlType | None) -> str | None:
    """Types whose stored forms compare correctly with each other share a family."""
    if t is None:
        return None
    if t.is_numeric:
        return "num"
    if t.is_sort_decimal:
        return f"dec{t.precision}_{t.scale}"
    if t.name == "date":
        return "date"
    if t.name == "time":
        return "time"
    if t.name in ("datetime", "datetime2", "smalldatetime"):
        return "datetime"
    if t.name == "datetimeoffset":
        return "dto"
    if t.is_binary:
        return "bin"
    return "str"


def compare_encoder(t: SqlType) -> Callable[[Any], Any] | None:
    """Encoder for a value compared with a column of type ``t`` (lenient: no length errors)."""
    if t.is_numeric:
        return None
    if t.name in ("char", "nchar") and t.length and t.length > 0:
        width = t.length

        def pad(value: Any) -> Any:
            if isinstance(value, str) and len(value) < width:
                return value.ljust(width)
            return T.adapt_untyped(value)

        return pad
    if t.name == "binary" and t.length and t.length > 0:
        size = t.length

        def pad_bytes(value: Any) -> Any:
            if isinstance(value, (bytes, bytearray, memoryview)) and len(value) < size:
                return bytes(value) + bytes(size - len(value))
            return T.adapt_untyped(value)

        return pad_bytes
    if t.is_string or t.is_binary:
        return None
    return t.encoder


def _literal_node(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Literal.number(int(value))
    if isinstance(value, (int, float)):
        return exp.Literal.number(repr(value) if isinstance(value, float) else value)
    if isinstance(value, Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, bytes):
        return exp.HexString(this=value.hex().upper())
    return exp.Literal.string(str(value))


def _decimal_literal_type(text: str) -> SqlType:
    digits = text.lstrip("-").replace(".", "").lstrip("0") or "0"
    scale = len(text.split(".")[1]) if "." in text else 0
    precision = max(len(digits), scale, 1)
    return SqlType("numeric", precision=min(precision, 38), scale=min(scale, 38))


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


class Translator:
    """Translates one statement (instances are cheap; one per statement)."""

    def __init__(self, catalog: Catalog, db_name: str) -> None:
        self.catalog = catalog
        self.db_name = db_name
        self.slots: list[Slot] = []
        self.raw: list[str] = []
        self.lock = False

    # ------------------------------------------------------------------------------------------
    # entry point
    # ------------------------------------------------------------------------------------------
    def translate(self, text: str) -> Plan:
        try:
            trees = sqlglot.parse(text, read="tsql")
        except ParseError as exc:
            raise errors.server_error(
                102, f"Incorrect syntax: {exc.errors[0]['description'] if exc.errors else exc}"
            ) from None
        trees = [t for t in trees if t is not None]
        if len(trees) != 1:
            raise errors.not_supported("several statements in one batch without ';' between them")
        node = trees[0]
        from . import ddl, procedures  # late: they import this module

        if isinstance(node, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
            return self._query_plan(node)
        if isinstance(node, exp.Insert):
            return self._insert(node)
        if isinstance(node, exp.Update):
            return self._update(node)
        if isinstance(node, exp.Delete):
            return self._delete(node)
        if isinstance(node, exp.TruncateTable):
            return self._truncate(node)
        if isinstance(node, exp.Execute):
            return procedures.plan_execute(self, node)
        if isinstance(node, (exp.Create, exp.Alter, exp.Drop)):
            return ddl.plan_ddl(self, node, text)
        if isinstance(node, exp.Command):
            raise errors.not_supported(
                f"the statement {str(node.this).upper()} {str(node.expression or '')[:40]}".strip()
            )
        raise errors.not_supported(f"the {type(node).__name__.upper()} statement")

    # ------------------------------------------------------------------------------------------
    # markers
    # ------------------------------------------------------------------------------------------
    def param(self, index: int, encoder: Callable[[Any], Any] | None) -> exp.Expression:
        self.slots.append(Slot(index, encoder))
        return exp.Placeholder(this=f"__emq_{len(self.slots) - 1}")

    def raw_node(self, snippet: str) -> exp.Expression:
        self.raw.append(snippet)
        return exp.Column(this=_ident(f"__emu_raw_{len(self.raw) - 1}"))

    def sql(self, node: exp.Expression) -> str:
        """SQLite text of a translated node (markers still in place)."""
        return node.sql(dialect="sqlite", identify=True)

    def finish(self, text: str) -> tuple[str, tuple[Slot, ...]]:
        """Expand raw snippets and turn parameter markers into ``?`` in order."""
        for _ in range(50):
            if '"__emu_raw_' not in text:
                break
            text = _RAW_RE.sub(lambda m: f"({self.raw[int(m.group(1))]})", text)
        order: list[Slot] = []

        def repl(match: re.Match[str]) -> str:
            order.append(self.slots[int(match.group(1))])
            return "?"

        text = _SLOT_RE.sub(repl, text)
        return text, tuple(order)

    @staticmethod
    def param_index(node: exp.Expression) -> int | None:
        """The caller's parameter index if ``node`` is a renamed ``?`` marker."""
        if isinstance(node, exp.Parameter):
            inner = node.this
            name = inner.name if isinstance(inner, exp.Expression) else str(inner)
            if name.startswith(PARAM_PREFIX) and name[len(PARAM_PREFIX) :].isdigit():
                return int(name[len(PARAM_PREFIX) :])
        if isinstance(node, exp.Paren):
            return Translator.param_index(node.this)
        return None

    # ------------------------------------------------------------------------------------------
    # queries
    # ------------------------------------------------------------------------------------------
    def _query_plan(self, node: exp.Expression) -> Plan:
        outs = self.query(node, None, top=True)
        sql, slots = self.finish(self.sql(node))
        columns = tuple(ResultColumn(o.name, o.type, o.python_type) for o in outs)
        return Plan("query", sql=sql, slots=slots, columns=columns, lock=self.lock)

    def query(self, node: exp.Expression, parent: Scope | None, top: bool = False) -> list[Out]:
        """Translate a SELECT / set operation in place; return its result columns."""
        if isinstance(node, exp.Subquery):
            return self.query(node.this, parent, top)
        if isinstance(node, exp.Select):
            return self._select(node, parent, top)
        if isinstance(node, (exp.Union, exp.Except, exp.Intersect)):
            with_ = node.args.get("with_") or node.args.get("with")
            scope = Scope(parent)
            if with_ is not None:
                self._ctes(with_, scope)
            left = self.query(node.this, scope, top=False)
            right = self.query(node.expression, scope, top=False)
            if len(left) != len(right):
                raise errors.server_error(
                    205,
                    "All queries combined using a UNION, INTERSECT or EXCEPT operator must have "
                    "an equal number of expressions in their target lists.",
                )
            outs = [
                Out(
                    a.name,
                    a.type
                    if (a.type == b.type)
                    else (a.type if family(a.type) == family(b.type) else None),
                    a.python_type,
                )
                for a, b in zip(left, right, strict=True)
            ]
            self._order_and_limit(node, scope, outs)
            if top:
                self._alias_converters(self._leftmost(node), outs)
            return outs
        raise errors.not_supported(f"{type(node).__name__} as a query")

    @staticmethod
    def _leftmost(node: exp.Expression) -> exp.Select:
        while not isinstance(node, exp.Select):
            node = node.this
        return node

    def _ctes(self, with_: exp.Expression, scope: Scope) -> None:
        if with_.args.get("recursive"):
            raise errors.not_supported("recursive common table expressions")
        for cte in with_.expressions:
            name = cte.alias
            outs = self.query(cte.this, scope, top=False)
            columns = [
                c.name for c in (cte.args.get("alias").columns if cte.args.get("alias") else [])
            ]
            if columns:
                if len(columns) != len(outs):
                    raise errors.server_error(
                        8158, f"'{name}' has more columns than were specified in the column list."
                    )
                outs = [Out(n, o.type, o.python_type) for n, o in zip(columns, outs, strict=True)]
            scope.ctes[name.lower()] = [(o.name, o.type) for o in outs]

    def _select(self, node: exp.Select, parent: Scope | None, top: bool) -> list[Out]:
        scope = Scope(parent)
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            self._ctes(with_, scope)
        for unsupported in ("into", "kind", "settings"):
            if node.args.get(unsupported):
                raise errors.not_supported(f"SELECT ... {unsupported.upper()}")
        from_ = node.args.get("from_") or node.args.get("from")
        if from_ is not None:
            from_.set("this", self._source(from_.this, scope))
        for join in node.args.get("joins") or []:
            if join.args.get("using"):
                raise errors.not_supported("JOIN ... USING")
            join.set("this", self._source(join.this, scope))
        for join in node.args.get("joins") or []:
            on = join.args.get("on")
            if on is not None:
                join.set("on", self.expr(on, scope)[0])
        where = node.args.get("where")
        if where is not None:
            where.set("this", self.expr(where.this, scope)[0])
        group = node.args.get("group")
        if group is not None:
            group.set("expressions", [self.expr(e, scope)[0] for e in group.expressions])
        having = node.args.get("having")
        if having is not None:
            having.set("this", self.expr(having.this, scope)[0])
        outs: list[Out] = []
        projections: list[exp.Expression] = []
        for projection in node.expressions:
            for item in self._expand_star(projection, scope):
                alias_name: str | None = None
                inner = item
                if isinstance(item, exp.Alias):
                    alias_name = item.alias
                    inner = item.this
                new, t = self.expr(inner, scope)
                name = alias_name if alias_name is not None else self._output_name(inner)
                python_type = t.python_type if t is not None else self._untyped_python_type(new)
                outs.append(Out(name, t, python_type))
                if alias_name is not None:
                    projections.append(exp.Alias(this=new, alias=_ident(alias_name)))
                elif isinstance(new, exp.Column) and name:
                    projections.append(new)
                else:
                    projections.append(exp.Alias(this=new, alias=_ident(name or f"__c{len(outs)}")))
        node.set("expressions", projections)
        self._order_and_limit(node, scope, outs)
        if top:
            self._alias_converters(node, outs)
        return outs

    def _untyped_python_type(self, node: exp.Expression) -> type:
        if isinstance(node, exp.Literal) and not node.is_string:
            return int if node.this.lstrip("-").isdigit() else float
        return str

    @staticmethod
    def _output_name(node: exp.Expression) -> str:
        if isinstance(node, exp.Column):
            return node.name
        return ""

    def _alias_converters(self, select: exp.Select, outs: list[Out]) -> None:
        """Give converted result columns a ``"<n> [EMU_...]"`` alias (sqlite3 PARSE_COLNAMES)."""
        projections = list(select.expressions)
        changed = False
        for i, (projection, out) in enumerate(zip(projections, outs, strict=True)):
            converter = out.type.converter if out.type is not None else None
            if converter is None:
                continue
            inner = projection.this if isinstance(projection, exp.Alias) else projection
            projections[i] = exp.Alias(this=inner, alias=_ident(f"c{i} [{converter}]"))
            changed = True
        if changed:
            select.set("expressions", projections)

    def _order_and_limit(self, node: exp.Expression, scope: Scope, outs: list[Out]) -> None:
        order = node.args.get("order")
        if order is not None:
            names = {o.name.lower(): i + 1 for i, o in reversed(list(enumerate(outs))) if o.name}
            items = []
            for ordered in order.expressions:
                target = ordered.this if isinstance(ordered, exp.Ordered) else ordered
                if (
                    isinstance(target, exp.Column)
                    and not target.table
                    and target.name.lower() in names
                ):
                    new: exp.Expression = exp.Literal.number(names[target.name.lower()])
                elif isinstance(target, exp.Literal) and not target.is_string:
                    new = target
                else:
                    new = self.expr(target, scope)[0]
                if isinstance(ordered, exp.Ordered):
                    ordered.set("this", new)
                    ordered.set("nulls_first", None)
                    items.append(ordered)
                else:
                    items.append(new)
            order.set("expressions", items)
        limit = node.args.get("limit")
        if limit is not None:
            options = limit.args.get("limit_options")
            if options is not None and (
                options.args.get("percent") or options.args.get("with_ties")
            ):
                raise errors.not_supported("TOP ... PERCENT / WITH TIES")
            key = "expression" if isinstance(limit, exp.Limit) else "count"
            value = limit.args.get(key)
            if value is not None:
                limit.set(key, self.expr(value, scope)[0])
        offset = node.args.get("offset")
        if offset is not None:
            offset.set("expression", self.expr(offset.expression, scope)[0])

    def _expand_star(self, projection: exp.Expression, scope: Scope) -> list[exp.Expression]:
        if isinstance(projection, exp.Star):
            if not scope.sources:
                raise errors.server_error(263, "Must specify table to select from.")
            return [
                exp.Column(this=_ident(name), table=_ident(source.alias))
                for source in scope.sources
                for name, _ in source.columns
            ]
        if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
            source = scope.alias(projection.table)
            if source is None:
                raise errors.server_error(
                    4104, f'The multi-part identifier "{projection.table}" could not be bound.'
                )
            return [
                exp.Column(this=_ident(name), table=_ident(source.alias))
                for name, _ in source.columns
            ]
        return [projection]

    # ------------------------------------------------------------------------------------------
    # FROM items
    # ------------------------------------------------------------------------------------------
    def _source(self, node: exp.Expression, scope: Scope) -> exp.Expression:
        if isinstance(node, exp.Table):
            return self._table_source(node, scope)
        if isinstance(node, exp.Subquery):
            alias = node.alias
            if not alias:
                raise errors.server_error(
                    102, "A derived table needs a name: (SELECT ...) AS name."
                )
            outs = self.query(node.this, None, top=False)
            cols = (
                [c.name for c in (node.args["alias"].columns or [])]
                if node.args.get("alias")
                else []
            )
            if cols:
                outs = [Out(n, o.type, o.python_type) for n, o in zip(cols, outs, strict=True)]
            scope.add(Source(alias, [(o.name, o.type) for o in outs]))
            node.set(
                "alias",
                exp.TableAlias(this=_ident(alias), columns=[_ident(c) for c in cols] or None),
            )
            return node
        if isinstance(node, exp.Lateral):
            raise errors.not_supported("CROSS APPLY / OUTER APPLY")
        if isinstance(node, exp.Values):
            raise errors.not_supported("VALUES as a table source")
        raise errors.not_supported(f"{type(node).__name__} in FROM")

    def _hints(self, node: exp.Table) -> None:
        hints = node.args.get("hints") or []
        names: set[str] = set()
        for hint in hints:
            for item in hint.expressions if hasattr(hint, "expressions") else []:
                word = (item.name if isinstance(item, exp.Expression) else str(item)).upper()
                if isinstance(item, (exp.Anonymous, exp.Func)):
                    word = (
                        str(item.this).upper()
                        if not isinstance(item, exp.Anonymous)
                        else str(item.name).upper()
                    )
                names.add(word)
        for word in names:
            if word not in _HINTS_LOCKING | _HINTS_SHARED_TABLE | _HINTS_HOLD | _HINTS_IGNORED:
                raise errors.not_supported(f"the table hint {word}")
        if names & _HINTS_LOCKING or (names & _HINTS_SHARED_TABLE and names & _HINTS_HOLD):
            self.lock = True
        node.set("hints", None)

    def _table_source(self, node: exp.Table, scope: Scope) -> exp.Expression:
        self._hints(node)
        target = node.this
        alias = node.alias
        if isinstance(target, (exp.Anonymous, exp.Func)):
            return self._table_function(node, target, scope)
        name = node.name
        schema = node.db or None
        database = node.catalog or None
        if not schema and not database and name.lower() in scope.ctes:
            columns = scope.ctes[name.lower()]
            scope.add(Source(alias or name, list(columns)))
            node.set("this", _ident(name))
            if alias:
                node.set("alias", exp.TableAlias(this=_ident(alias)))
            return node
        table = self.catalog.resolve(name, schema, database, self.db_name)
        exposed = alias or table.name
        scope.add(Source(exposed, [(c.name, c.type) for c in table.columns], table))
        return exp.Table(this=_ident(table.physical), alias=exp.TableAlias(this=_ident(exposed)))

    def _table_function(
        self, node: exp.Table, call: exp.Expression, scope: Scope
    ) -> exp.Expression:
        name = call.name if isinstance(call, exp.Anonymous) else type(call).__name__
        schema = (node.db or "").lower()
        lname = name.lower()
        display = f"{node.db}.{name}" if node.db else name
        if schema != "cdc" or not (
            lname.startswith(functions.ALL_CHANGES) or lname.startswith(functions.NET_CHANGES)
        ):
            raise errors.not_supported(f"the table-valued function {display}")
        if not self.catalog.cdc_enabled:
            raise errors.invalid_object(display)
        kind = "all" if lname.startswith(functions.ALL_CHANGES) else "net"
        ci = name[len(functions.ALL_CHANGES if kind == "all" else functions.NET_CHANGES) :]
        instance = self.catalog.instances.get(ci.lower())
        if instance is None or (kind == "net" and not instance.supports_net_changes):
            raise errors.invalid_object(display)
        change_table = self.catalog.tables_by_id.get(instance.object_id)
        if change_table is None:
            raise errors.invalid_object(display)
        args = list(call.expressions)
        if len(args) != 3:
            raise errors.cdc_function_range(
                "cdc." + (functions.ALL_CHANGES if kind == "all" else functions.NET_CHANGES)
            )
        lo = self.sql(self.expr(args[0], scope, Want(T.LSN))[0])
        hi = self.sql(self.expr(args[1], scope, Want(T.LSN))[0])
        option = self.sql(self.expr(args[2], scope)[0])
        builder = functions.all_changes_sql if kind == "all" else functions.net_changes_sql
        snippet = builder(instance, lo, hi, option)
        columns = functions.change_function_columns(kind, instance, change_table)
        alias = node.alias or name
        scope.add(Source(alias, columns))
        marker = f"__emu_raw_{len(self.raw)}"
        self.raw.append(snippet)
        return exp.Table(this=_ident(marker), alias=exp.TableAlias(this=_ident(alias)))

    # ------------------------------------------------------------------------------------------
    # expressions
    # ------------------------------------------------------------------------------------------
    def is_value(self, node: exp.Expression) -> bool:
        if self.param_index(node) is not None:
            return True
        if isinstance(node, (exp.Literal, exp.National, exp.Null, exp.HexString)):
            return True
        if isinstance(node, exp.Neg):
            return isinstance(node.this, exp.Literal)
        if isinstance(node, exp.Paren):
            return self.is_value(node.this)
        return False

    def resolve_column(
        self, node: exp.Column, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        name = node.name
        qualifier = node.table
        if qualifier:
            source = scope.alias(qualifier)
            if source is None:
                raise errors.server_error(
                    4104, f'The multi-part identifier "{qualifier}.{name}" could not be bound.'
                )
            hit = source.find(name)
            if hit is None:
                raise errors.invalid_column(name)
            return exp.Column(this=_ident(hit[0]), table=_ident(source.alias)), hit[1]
        current: Scope | None = scope
        while current is not None:
            matches = [(s, h) for s in current.sources if (h := s.find(name)) is not None]
            if len(matches) > 1:
                raise errors.ambiguous_column(name)
            if matches:
                source, hit = matches[0]
                return exp.Column(this=_ident(hit[0]), table=_ident(source.alias)), hit[1]
            current = current.parent
        raise errors.invalid_column(name)

    def value(
        self, node: exp.Expression, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        """A parameter or literal, encoded for ``want``."""
        index = self.param_index(node)
        if index is not None:
            if want is None:
                return self.param(index, None), None
            encoder = want.type.encoder if want.assign else compare_encoder(want.type)
            return self.param(index, encoder), want.type
        if isinstance(node, exp.Paren):
            inner, t = self.value(node.this, want)
            return exp.Paren(this=inner), t
        literal, natural = self._literal_value(node)
        if literal is None:
            return exp.Null(), want.type if want else None
        if want is None:
            return _literal_node(literal), natural
        target = want.type
        if not want.assign and target.is_numeric and isinstance(literal, (int, float, Decimal)):
            return _literal_node(literal), natural
        encoder = target.encoder if want.assign else (compare_encoder(target) or T.adapt_untyped)
        return _literal_node(encoder(literal)), target

    def _literal_value(self, node: exp.Expression) -> tuple[Any, SqlType | None]:
        if isinstance(node, exp.Null):
            return None, None
        if isinstance(node, exp.National):
            text = node.this
            return text, T.nvarchar(max(len(text), 1))
        if isinstance(node, exp.HexString):
            data = bytes.fromhex(node.this if len(node.this) % 2 == 0 else "0" + node.this)
            return data, SqlType("varbinary", length=max(len(data), 1))
        if isinstance(node, exp.Neg):
            value, t = self._literal_value(node.this)
            return -value, t
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this, T.varchar(max(len(node.this), 1))
            text = node.this
            if re.fullmatch(r"\d+", text):
                number = int(text)
                if number < 2**31:
                    return number, T.INT
                if number < 2**63:
                    return number, T.BIGINT
                return Decimal(text), _decimal_literal_type(text)
            if "e" in text.lower():
                return float(text), T.FLOAT
            return Decimal(text), _decimal_literal_type(text)
        raise errors.not_supported(f"the literal {node.sql('tsql')}")

    def expr(
        self, node: exp.Expression, scope: Scope, want: Want | None = None
    ) -> tuple[exp.Expression, SqlType | None]:
        """Translate an expression; return the new node and its SQL Server type (or None)."""
        if self.is_value(node):
            return self.value(node, want)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise errors.not_supported("t.* outside the select list")
            return self.resolve_column(node, scope)
        if isinstance(node, _COMPARISONS):
            return self._comparison(node, scope)
        if isinstance(node, exp.Between):
            this, t = self.expr(node.this, scope)
            w = Want(t) if t is not None else None
            low, lt = self.expr(node.args["low"], scope, w)
            high, ht = self.expr(node.args["high"], scope, w)
            self._check_comparable(t, lt, node)
            self._check_comparable(t, ht, node)
            return exp.Between(this=this, low=low, high=high), T.BIT
        if isinstance(node, exp.In):
            return self._in(node, scope)
        if isinstance(node, _ARITH):
            return self._arith(node, scope)
        if isinstance(node, exp.Neg):
            inner, t = self.expr(node.this, scope)
            if t is not None and t.is_text_encoded:
                raise errors.not_supported(f"arithmetic on {t.sql} values")
            return exp.Neg(this=inner), t
        if isinstance(node, exp.Subquery):
            outs = self.query(node.this, scope)
            if len(outs) != 1:
                raise errors.server_error(
                    116,
                    "Only one expression can be specified in the select list when the subquery is "
                    "not introduced with EXISTS.",
                )
            return node, outs[0].type
        if isinstance(node, exp.Exists):
            self.query(node.this, scope)
            return node, T.BIT
        if isinstance(node, exp.Case):
            return self._case(node, scope, want)
        if isinstance(node, exp.If):
            return self._iif(node, scope, want)
        if isinstance(node, exp.Coalesce):
            return self._coalesce(node, scope, want)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node.this, node.args["to"], scope)
        if isinstance(node, exp.Convert):
            if node.args.get("style") is not None:
                raise errors.not_supported("CONVERT with a style argument")
            return self._cast(node.expression, node.this, scope)
        if isinstance(node, exp.Window):
            return self._window(node, scope)
        if isinstance(node, (exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg)):
            return self._aggregate(node, scope)
        if isinstance(node, exp.Length):
            inner, _ = self.expr(node.this, scope)
            return exp.Anonymous(
                this="LENGTH", expressions=[exp.Anonymous(this="RTRIM", expressions=[inner])]
            ), T.INT
        if isinstance(node, (exp.Left, exp.Right)):
            inner, t = self.expr(node.this, scope)
            count, _ = self.expr(node.expression, scope)
            if isinstance(node, exp.Left):
                return exp.Anonymous(
                    this="SUBSTR", expressions=[inner, exp.Literal.number(1), count]
                ), t
            return exp.Anonymous(
                this="SUBSTR", expressions=[inner, exp.Neg(this=exp.Paren(this=count))]
            ), t
        if isinstance(node, exp.Concat):
            parts = []
            for arg in node.expressions:
                inner, t = self.expr(arg, scope)
                if t is not None and t.is_text_encoded:
                    raise errors.not_supported(f"CONCAT of {t.sql} values")
                parts.append(
                    exp.Coalesce(
                        this=exp.Cast(this=inner, to=exp.DataType.build("TEXT")),
                        expressions=[exp.Literal.string("")],
                    )
                )
            result = parts[0]
            for part in parts[1:]:
                result = exp.DPipe(this=result, expression=part)
            return result, T.nvarchar(4000)
        if isinstance(node, exp.Uuid) and not node.args:
            return exp.Anonymous(this="_emu_newid", expressions=[]), SqlType("uniqueidentifier")
        if isinstance(node, exp.CurrentTimestampLTZ):
            return self._now("SYSDATETIMEOFFSET", want)
        if isinstance(node, exp.CurrentSchema):
            arg = node.this
            return self._anonymous(
                exp.Anonymous(this="SCHEMA_NAME", expressions=[arg] if arg is not None else []),
                scope,
                want,
            )
        if isinstance(node, exp.DateDiff):
            return self._datediff(node, scope)
        if isinstance(node, exp.CurrentTimestamp):
            return self._now("GETDATE", want)
        if isinstance(node, exp.ObjectId):
            return self._object_id(node, scope)
        if isinstance(node, exp.Dot):
            return self._dotted_function(node, scope, want)
        if isinstance(node, exp.Anonymous):
            return self._anonymous(node, scope, want)
        if isinstance(node, exp.Parameter):
            return self._session_variable(node)
        if isinstance(node, (*_PASSTHROUGH, *_WINDOW_FUNCS)):
            return self._passthrough(node, scope)
        if isinstance(node, exp.Boolean):
            return exp.Literal.number(1 if node.this else 0), T.BIT
        raise errors.not_supported(
            f"the expression {node.sql('tsql')[:60]!r} ({type(node).__name__})"
        )

    def _passthrough(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        result_type: SqlType | None = None
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression) and not isinstance(value, (exp.DataType, exp.Var)):
                new, t = self.expr(value, scope)
                node.set(key, new)
                if key == "this":
                    result_type = t
            elif isinstance(value, list):
                node.set(
                    key,
                    [self.expr(v, scope)[0] if isinstance(v, exp.Expression) else v for v in value],
                )
        if isinstance(node, (exp.Not, exp.And, exp.Or, exp.Is, exp.Like, exp.ILike, exp.Exists)):
            return node, T.BIT
        if isinstance(node, exp.RowNumber):
            return node, T.BIGINT
        if isinstance(node, exp.StrPosition):
            return node, T.INT
        if isinstance(node, (exp.Upper, exp.Lower, exp.Trim, exp.Substring, exp.Replace)):
            if result_type is not None and result_type.is_text_encoded:
                raise errors.not_supported(f"string functions on {result_type.sql} values")
            return node, T.nvarchar(
                4000
            ) if result_type is None or not result_type.is_string else result_type
        return node, result_type

    def _check_comparable(self, a: SqlType | None, b: SqlType | None, node: exp.Expression) -> None:
        fa, fb = family(a), family(b)
        if fa is None or fb is None or fa == fb:
            return
        raise errors.not_supported(
            f"comparing {a.sql if a else '?'} with {b.sql if b else '?'} in "
            f"{node.sql('tsql')[:60]!r}"
        )

    def _comparison(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        left, right = node.this, node.expression
        if self.is_value(left) and not self.is_value(right):
            rhs, rt = self.expr(right, scope)
            lhs, lt = self.expr(left, scope, Want(rt) if rt is not None else None)
        else:
            lhs, lt = self.expr(left, scope)
            rhs, rt = self.expr(right, scope, Want(lt) if lt is not None else None)
        self._check_comparable(lt, rt, node)
        if "varbinary" in (lt.name if lt else "", rt.name if rt else ""):
            # binary values of different lengths compare as if zero-padded (0x00 = 0x0000)
            lhs = exp.Anonymous(this="_emu_bin_norm", expressions=[lhs])
            rhs = exp.Anonymous(this="_emu_bin_norm", expressions=[rhs])
        return type(node)(this=lhs, expression=rhs), T.BIT

    def _in(self, node: exp.In, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        this, t = self.expr(node.this, scope)
        node.set("this", this)
        query = node.args.get("query")
        if query is not None:
            outs = self.query(query.this if isinstance(query, exp.Subquery) else query, scope)
            if len(outs) != 1:
                raise errors.server_error(
                    116,
                    "Only one expression can be specified in the select list when the subquery is "
                    "not introduced with EXISTS.",
                )
            self._check_comparable(t, outs[0].type, node)
            return node, T.BIT
        items = []
        for item in node.expressions:
            new, it = self.expr(item, scope, Want(t) if t is not None else None)
            self._check_comparable(t, it, node)
            items.append(new)
        node.set("expressions", items)
        return node, T.BIT

    def _arith(self, node: exp.Expression, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        lhs, lt = self.expr(node.this, scope)
        rhs, rt = self.expr(node.expression, scope)
        for t in (lt, rt):
            if t is not None and t.is_text_encoded:
                raise errors.not_supported(
                    f"arithmetic on {t.sql} values ({node.sql('tsql')[:60]!r})"
                )
            if t is not None and t.is_binary:
                raise errors.not_supported(f"arithmetic on {t.sql} values")
        stringy = [
            t is not None and (t.is_string or t.name == "uniqueidentifier") for t in (lt, rt)
        ]
        if isinstance(node, exp.Add) and any(stringy):
            other = rt if stringy[0] else lt
            if other is not None and not (other.is_string or other.name == "uniqueidentifier"):
                raise errors.not_supported(
                    f"'+' between a string and a number ({node.sql('tsql')[:60]!r})"
                )
            return exp.DPipe(this=lhs, expression=rhs), T.nvarchar(4000)
        if any(stringy):
            raise errors.not_supported(f"arithmetic on strings ({node.sql('tsql')[:60]!r})")
        if lt is None and rt is None:
            raise errors.not_supported(
                f"arithmetic between values of unknown type ({node.sql('tsql')[:60]!r}); "
                "CAST one operand"
            )
        known = [t for t in (lt, rt) if t is not None]
        if all(t.is_integer or t.name == "bit" for t in known):
            result = T.BIGINT if any(t.name == "bigint" for t in known) else T.INT
        else:
            result = T.FLOAT
        return type(node)(this=lhs, expression=rhs), result

    def _case(
        self, node: exp.Case, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        operand = node.args.get("this")
        ot: SqlType | None = None
        if operand is not None:
            operand, ot = self.expr(operand, scope)
            node.set("this", operand)
        result_type = self._branch_type(
            [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")],
            scope,
            want,
        )
        branch_want = Want(result_type) if result_type is not None else None
        for branch in node.args.get("ifs") or []:
            cond = branch.this
            if operand is not None:
                new_cond, ct = self.expr(cond, scope, Want(ot) if ot is not None else None)
                self._check_comparable(ot, ct, node)
            else:
                new_cond = self.expr(cond, scope)[0]
            branch.set("this", new_cond)
            branch.set("true", self.expr(branch.args["true"], scope, branch_want)[0])
        default = node.args.get("default")
        if default is not None:
            node.set("default", self.expr(default, scope, branch_want)[0])
        return node, result_type

    def _branch_type(
        self, branches: list[exp.Expression | None], scope: Scope, want: Want | None
    ) -> SqlType | None:
        for branch in branches:
            if branch is None or self.is_value(branch):
                continue
            probe = branch.copy()
            _, t = Translator(self.catalog, self.db_name).expr(probe, scope)
            if t is not None:
                return t
        for branch in branches:
            if branch is not None and self.is_value(branch) and self.param_index(branch) is None:
                return self._literal_value(branch)[1]
        return want.type if want else None

    def _iif(
        self, node: exp.If, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        result_type = self._branch_type(
            [node.args.get("true"), node.args.get("false")], scope, want
        )
        branch_want = Want(result_type) if result_type is not None else None
        node.set("this", self.expr(node.this, scope)[0])
        node.set("true", self.expr(node.args["true"], scope, branch_want)[0])
        if node.args.get("false") is not None:
            node.set("false", self.expr(node.args["false"], scope, branch_want)[0])
        return node, result_type

    def _coalesce(
        self, node: exp.Coalesce, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        args = [node.this, *node.expressions]
        result_type = self._branch_type(args, scope, want)
        w = Want(result_type) if result_type is not None else None
        new_args = []
        for arg in args:
            new, t = self.expr(arg, scope, w)
            self._check_comparable(result_type, t, node)
            new_args.append(new)
        return exp.Coalesce(this=new_args[0], expressions=new_args[1:]), result_type

    def _cast(
        self, value: exp.Expression, to: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        target = self.cast_type(to)
        if self.is_value(value):
            return self.value(value, Want(target, assign=True))
        inner, source = self.expr(value, scope)
        if source == target:
            return inner, target
        if target.is_integer:
            if source is None or source.is_numeric:
                return exp.Cast(this=inner, to=exp.DataType.build("INTEGER")), target
        elif target.name in ("float", "real"):
            if source is None or source.is_numeric:
                return exp.Cast(this=inner, to=exp.DataType.build("REAL")), target
        elif target.is_real_decimal:
            if source is None or source.is_numeric:
                return exp.Anonymous(
                    this="ROUND", expressions=[inner, exp.Literal.number(target.decimal_scale)]
                ), target
        elif target.name == "bit":
            if source is None or source.is_numeric:
                return exp.Case(
                    ifs=[exp.If(this=exp.Is(this=inner, expression=exp.Null()), true=exp.Null())],
                    default=exp.Anonymous(
                        this="IIF",
                        expressions=[
                            exp.NEQ(this=inner.copy(), expression=exp.Literal.number(0)),
                            exp.Literal.number(1),
                            exp.Literal.number(0),
                        ],
                    ),
                ), target
        elif target.is_string:
            if source is None or source.is_integer or source.name == "bit":
                return exp.Cast(this=inner, to=exp.DataType.build("TEXT")), target
            if source.is_string or source.name in ("uniqueidentifier", "date"):
                if target.length and target.length > 0:
                    return exp.Anonymous(
                        this="SUBSTR",
                        expressions=[
                            inner,
                            exp.Literal.number(1),
                            exp.Literal.number(target.length),
                        ],
                    ), target
                return inner, target
        elif target.name == "date" and source is not None and family(source) == "datetime":
            return exp.Anonymous(
                this="SUBSTR", expressions=[inner, exp.Literal.number(1), exp.Literal.number(10)]
            ), target
        elif target.name == "datetime2" and source is not None and source.name == "date":
            return exp.DPipe(this=inner, expression=exp.Literal.string(" 00:00:00.0000000")), target
        elif (
            family(target) == family(source) and target.name not in ("datetime", "smalldatetime")
        ) or (target.is_binary and source is not None and source.is_binary):
            return inner, target
        raise errors.not_supported(
            f"CAST/CONVERT from {source.sql if source else 'an expression of unknown type'} to "
            f"{target.sql}"
        )

    def cast_type(self, to: exp.Expression) -> SqlType:
        text = to.sql("tsql") if isinstance(to, exp.DataType) else str(to)
        text = text.replace("VARCHAR(MAX)", "varchar(max)")
        sql_type, _ = T.parse_type_text(text)
        return sql_type

    def _window(self, node: exp.Window, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        func, t = self.expr(node.this, scope)
        node.set("this", func)
        partition = node.args.get("partition_by")
        if partition:
            node.set("partition_by", [self.expr(p, scope)[0] for p in partition])
        order = node.args.get("order")
        if order is not None:
            order.set("expressions", [self.expr(o, scope)[0] for o in order.expressions])
        return node, t

    def _aggregate(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        arg = node.this
        if isinstance(node, exp.Count):
            if arg is not None and not isinstance(arg, exp.Star):
                node.set("this", self.expr(arg, scope)[0])
            return node, T.INT
        if arg is None:
            raise errors.not_supported(f"{type(node).__name__.upper()} without an argument")
        if isinstance(arg, exp.Distinct):
            inner_args = [self.expr(a, scope) for a in arg.expressions]
            arg.set("expressions", [a for a, _ in inner_args])
            t = inner_args[0][1] if inner_args else None
            new_arg: exp.Expression = arg
        else:
            new_arg, t = self.expr(arg, scope)
        node.set("this", new_arg)
        if isinstance(node, (exp.Min, exp.Max)):
            return node, t
        if t is not None and (t.is_text_encoded or not (t.is_numeric)):
            raise errors.not_supported(f"{type(node).__name__.upper()} of {t.sql} values")
        if isinstance(node, exp.Sum):
            if t is None:
                return node, None
            if t.is_integer or t.name == "bit":
                return node, T.BIGINT if t.name == "bigint" else T.INT
            if t.is_real_decimal:
                return node, SqlType("decimal", precision=15, scale=t.decimal_scale)
            return node, T.FLOAT
        # AVG
        if t is not None and (t.is_integer or t.name == "bit"):
            return exp.Cast(
                this=node, to=exp.DataType.build("INTEGER")
            ), T.BIGINT if t.name == "bigint" else T.INT
        if t is not None and t.is_real_decimal:
            return node, SqlType("decimal", precision=15, scale=max(6, t.decimal_scale))
        return node, T.FLOAT if t is not None else None

    def _now(self, name: str, want: Want | None) -> tuple[exp.Expression, SqlType | None]:
        clock, natural = _NOW_FUNCS[name]
        target = natural
        if want is not None and family(want.type) in ("datetime", "date", "time", "dto"):
            target = want.type
        call = exp.Anonymous(
            this="_emu_now", expressions=[exp.Literal.string(clock), exp.Literal.string(target.sql)]
        )
        return call, target

    _DATEDIFF_SECONDS: dict[str, int] = {  # noqa: RUF012
        "SECOND": 1,
        "SS": 1,
        "S": 1,
        "MINUTE": 60,
        "MI": 60,
        "N": 60,
        "HOUR": 3600,
        "HH": 3600,
    }

    def _datediff(self, node: exp.DateDiff, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        """DATEDIFF(unit, start, end): unit boundaries crossed, for datetime and date values."""
        unit_node = node.args.get("unit")
        unit = (unit_node.name if unit_node is not None else "DAY").upper()

        def operand(value: exp.Expression) -> str:
            if isinstance(value, exp.TimeStrToTime):
                value = value.this
            new, t = self.expr(value, scope, Want(SqlType("datetime2", scale=7)))
            if family(t) not in ("datetime", "date"):
                raise errors.not_supported(f"DATEDIFF on {t.sql if t else 'untyped'} values")
            return self.sql(new)

        end, start = operand(node.this), operand(node.expression)
        if unit in ("DAY", "DD", "D"):
            snippet = (
                f"SELECT CAST(julianday(substr({end}, 1, 10)) - julianday(substr({start}, 1, 10)) "
                "AS INTEGER)"
            )
            return self.raw_node(snippet), T.INT
        size = self._DATEDIFF_SECONDS.get(unit)
        if size is None:
            raise errors.not_supported(f"DATEDIFF with the unit {unit}")

        def boundaries(text: str) -> str:
            seconds = f"CAST(strftime('%s', substr({text}, 1, 19)) AS INTEGER)"
            return f"(({seconds} - ((({seconds}) % {size}) + {size}) % {size}) / {size})"

        return self.raw_node(f"SELECT {boundaries(end)} - {boundaries(start)}"), T.INT

    def _object_id(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        arg = self.sql(self.expr(node.this, scope, Want(T.nvarchar(776)))[0])
        snippet = (
            "SELECT o.object_id FROM _emu_objects AS o JOIN _emu_schemas AS s "
            f"ON s.schema_id = o.schema_id WHERE s.name = _emu_objname({arg}, 1) "
            f"AND o.name = _emu_objname({arg}, 0)"
        )
        return self.raw_node(snippet), T.INT

    def _session_variable(self, node: exp.Parameter) -> tuple[exp.Expression, SqlType | None]:
        inner = node.this
        name = (inner.name if isinstance(inner, exp.Expression) else str(inner)).upper()
        if isinstance(inner, exp.Parameter):
            name = inner.name.upper()
            if name == "TRANCOUNT":
                return exp.Anonymous(this="_emu_trancount", expressions=[]), T.INT
            if name == "SPID":
                return exp.Anonymous(this="_emu_spid", expressions=[]), T.SMALLINT
            if name == "VERSION":
                return exp.Literal.string(
                    "Microsoft SQL Server 2022 (cdc_assets emulator on SQLite)"
                ), T.nvarchar(300)
            if name == "SERVERNAME":
                return exp.Literal.string("cdc_assets_emulator"), T.SYSNAME
            raise errors.not_supported(f"@@{name}")
        raise errors.not_supported(f"T-SQL variables (@{name.lower()})")

    def _anonymous(
        self, node: exp.Anonymous, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        name = node.name.upper()
        args = list(node.expressions)
        if name in _NOW_FUNCS and not args:
            return self._now(name, want)
        if name == "NEWID" and not args:
            return exp.Anonymous(this="_emu_newid", expressions=[]), SqlType("uniqueidentifier")
        if name == "DB_ID":
            return exp.Literal.number(5), T.INT
        if name == "DB_NAME":
            return exp.Anonymous(this="_emu_db_name", expressions=[]), T.SYSNAME
        if name == "OBJECT_NAME" and len(args) == 1:
            arg = self.sql(self.expr(args[0], scope, Want(T.INT))[0])
            return self.raw_node(
                f"SELECT name FROM _emu_objects WHERE object_id = {arg}"
            ), T.SYSNAME
        if name == "SCHEMA_NAME":
            if not args:
                return exp.Literal.string("dbo"), T.SYSNAME
            arg = self.sql(self.expr(args[0], scope, Want(T.INT))[0])
            return self.raw_node(
                f"SELECT name FROM _emu_schemas WHERE schema_id = {arg}"
            ), T.SYSNAME
        if name == "SCHEMA_ID":
            if not args:
                return exp.Literal.number(1), T.INT
            arg = self.sql(self.expr(args[0], scope, Want(T.SYSNAME))[0])
            return self.raw_node(f"SELECT schema_id FROM _emu_schemas WHERE name = {arg}"), T.INT
        if name == "COUNT_BIG":
            count = exp.Count(this=args[0] if args else exp.Star())
            new, _ = self._aggregate(count, scope)
            return new, T.BIGINT
        if name == "ISNULL" and len(args) == 2:
            return self._coalesce(exp.Coalesce(this=args[0], expressions=[args[1]]), scope, want)
        if name == "QUOTENAME" and len(args) == 1:
            inner, t = self.expr(args[0], scope)
            if t is not None and not t.is_string:
                raise errors.not_supported(f"QUOTENAME of {t.sql} values")
            quoted = exp.Anonymous(
                this="REPLACE",
                expressions=[inner, exp.Literal.string("]"), exp.Literal.string("]]")],
            )
            text = exp.DPipe(
                this=exp.DPipe(this=exp.Literal.string("["), expression=quoted),
                expression=exp.Literal.string("]"),
            )
            return text, T.nvarchar(258)
        if name == "SCOPE_IDENTITY" and not args:
            return exp.Anonymous(this="last_insert_rowid", expressions=[]), T.INT
        raise errors.not_supported(f"the function {node.name}()")

    def _dotted_function(
        self, node: exp.Dot, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        call = node.expression
        owner = node.this.name if isinstance(node.this, exp.Expression) else str(node.this)
        if not isinstance(call, exp.Anonymous):
            raise errors.not_supported(f"the expression {node.sql('tsql')[:60]!r}")
        name = call.name.lower()
        display = f"{owner}.{call.name}"
        if owner.lower() != "sys":
            raise errors.not_supported(f"the function {display}()")
        args = list(call.expressions)
        cdc = self.catalog.cdc_enabled

        def arg(i: int, t: SqlType | None = None) -> str:
            if i >= len(args):
                raise errors.server_error(
                    313,
                    "An insufficient number of arguments were supplied for the procedure or "
                    f"function {display}.",
                )
            return self.sql(self.expr(args[i], scope, Want(t) if t is not None else None)[0])

        if name == "fn_cdc_get_max_lsn":
            if not cdc:
                return exp.Null(), T.LSN
            return self.raw_node(functions.MAX_LSN_SQL), T.LSN
        if name == "fn_cdc_get_min_lsn":
            a = arg(0, T.SYSNAME)
            if not cdc:
                return exp.HexString(this="00" * 10), T.LSN
            return self.raw_node("SELECT " + functions.min_lsn_sql(a)), T.LSN
        if name == "fn_cdc_increment_lsn":
            return exp.Anonymous(
                this="_emu_lsn_inc", expressions=[self.expr(args[0], scope, Want(T.LSN))[0]]
            ), T.LSN
        if name == "fn_cdc_decrement_lsn":
            return exp.Anonymous(
                this="_emu_lsn_dec", expressions=[self.expr(args[0], scope, Want(T.LSN))[0]]
            ), T.LSN
        if name == "fn_cdc_map_lsn_to_time":
            a = arg(0, T.LSN)
            if not cdc:
                return exp.Null(), T.DATETIME
            return self.raw_node(functions.map_lsn_to_time_sql(a)), T.DATETIME
        if name == "fn_cdc_map_time_to_lsn":
            if len(args) != 2:
                raise errors.server_error(
                    313,
                    "An insufficient number of arguments were supplied for the procedure or "
                    f"function {display}.",
                )
            operator: str | None = None
            literal = args[0]
            if isinstance(literal, (exp.Literal, exp.National)) and (
                isinstance(literal, exp.National) or literal.is_string
            ):
                operator = " ".join(literal.this.lower().split())
                if operator not in (
                    "largest less than",
                    "largest less than or equal",
                    "smallest greater than",
                    "smallest greater than or equal",
                ):
                    raise errors.server_error(
                        22986,
                        f"The value '{literal.this}' is not a valid relational operator for "
                        "sys.fn_cdc_map_time_to_lsn.",
                    )
            op_sql = arg(0, T.nvarchar(30)) if operator is None else "''"
            time_sql = arg(1, T.DATETIME)
            if not cdc:
                return exp.Null(), T.LSN
            return self.raw_node(functions.map_time_to_lsn_sql(operator, op_sql, time_sql)), T.LSN
        if name == "fn_cdc_get_column_ordinal":
            ci, col = arg(0, T.SYSNAME), arg(1, T.SYSNAME)
            if not cdc:
                return exp.Null(), T.INT
            return self.raw_node(functions.column_ordinal_sql(ci, col)), T.INT
        if name == "fn_cdc_has_column_changed":
            ci, col, mask = arg(0, T.SYSNAME), arg(1, T.SYSNAME), arg(2, T.VARBINARY128)
            if not cdc:
                return exp.Null(), T.BIT
            return self.raw_node("SELECT " + functions.has_column_changed_sql(ci, col, mask)), T.BIT
        if name == "fn_cdc_is_bit_set":
            pos, mask = arg(0, T.INT), arg(1, T.VARBINARY128)
            return self.raw_node(f"SELECT _emu_bit_set({mask}, {pos})"), T.BIT
        raise errors.not_supported(f"the function {display}()")

    # ------------------------------------------------------------------------------------------
    # assignment (INSERT values, UPDATE SET)
    # ------------------------------------------------------------------------------------------
    def assign(self, node: exp.Expression, target: SqlType, scope: Scope) -> exp.Expression:
        """Translate a value written to a column of type ``target``, converting like SQL Server."""
        if self.is_value(node):
            return self.value(node, Want(target, assign=True))[0]
        if isinstance(node, exp.Var) and node.name.upper() == "DEFAULT":
            raise errors.not_supported("DEFAULT in a VALUES list or SET clause")
        new, t = self.expr(node, scope, Want(target, assign=True))
        if t == target:
            return new
        if t is None:
            if target.is_text_encoded or target.name in (
                "uniqueidentifier",
                "char",
                "nchar",
                "binary",
            ):
                raise errors.not_supported(
                    f"assigning the expression {node.sql('tsql')[:60]!r} to a {target.sql} column; "
                    "pass the value as a parameter"
                )
        elif family(t) != family(target):
            if target.is_string and (t.is_integer or t.name == "bit"):
                return exp.Cast(this=new, to=exp.DataType.build("TEXT"))
            raise errors.not_supported(f"assigning a {t.sql} value to a {target.sql} column")
        if target.is_real_decimal and not (
            t is not None and t.is_real_decimal and t.decimal_scale <= target.decimal_scale
        ):
            return exp.Anonymous(
                this="ROUND", expressions=[new, exp.Literal.number(target.decimal_scale)]
            )
        if target.is_integer and not (t is not None and (t.is_integer or t.name == "bit")):
            return exp.Cast(this=new, to=exp.DataType.build("INTEGER"))
        if target.name in ("char", "nchar") and not (t is not None and t == target):
            raise errors.not_supported(
                f"assigning an expression to a {target.sql} column; pass the value as a parameter"
            )
        if target.name == "real" and t is not None and t.name != "real":
            raise errors.not_supported(
                "assigning an expression to a real column; pass the value as a parameter"
            )
        return new

    # ------------------------------------------------------------------------------------------
    # DML
    # ------------------------------------------------------------------------------------------
    def target_table(self, node: exp.Table) -> Table:
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise errors.not_supported(f"writing to {node.sql('tsql')[:60]!r}")
        self._hints(node)
        table = self.catalog.resolve(node.name, node.db or None, node.catalog or None, self.db_name)
        if table.kind != "user":
            raise errors.not_supported(f"writing to the system object {table.display}")
        return table

    def _insert(self, node: exp.Insert) -> Plan:
        for unsupported in ("returning", "conflict", "overwrite"):
            if node.args.get(unsupported):
                raise errors.not_supported(f"INSERT ... {unsupported.upper()}")
        target = node.this
        column_nodes: list[exp.Expression] = []
        if isinstance(target, exp.Schema):
            column_nodes = list(target.expressions)
            target = target.this
        table = self.target_table(target)
        if column_nodes:
            columns = []
            for c in column_nodes:
                column = table.column(c.name)
                if column is None:
                    raise errors.invalid_column(c.name)
                if column in columns:
                    raise errors.server_error(
                        264,
                        f"The column name '{column.name}' is specified more than once in the SET "
                        "clause or column list of an INSERT.",
                    )
                columns.append(column)
        else:
            columns = [c for c in table.columns if not c.identity]
        for column in columns:
            if column.identity:
                raise errors.server_error(
                    544,
                    f"Cannot insert explicit value for identity column in table '{table.name}' "
                    "when "
                    "IDENTITY_INSERT is set to OFF.",
                )
        quoted = ", ".join(quote(c.name) for c in columns)
        head = f"INSERT INTO {quote(table.physical)}" + (f" ({quoted})" if columns else "")
        source = node.expression
        scope = Scope()
        if source is None:
            text = f"INSERT INTO {quote(table.physical)} DEFAULT VALUES"
        elif isinstance(source, exp.Values):
            rows = []
            for row in source.expressions:
                values = row.expressions if isinstance(row, exp.Tuple) else [row]
                if len(values) != len(columns):
                    if len(values) > len(columns):
                        raise errors.server_error(
                            110,
                            "There are fewer columns in the INSERT statement than values "
                            "specified in the VALUES clause. The number of values in the VALUES "
                            "clause must match the number of columns specified in the INSERT "
                            "statement.",
                        )
                    raise errors.server_error(
                        109,
                        "There are more columns in the INSERT statement than values specified in "
                        "the VALUES clause. The number of values in the VALUES clause must match "
                        "the number of columns specified in the INSERT statement.",
                    )
                rows.append(
                    "("
                    + ", ".join(
                        self.sql(self.assign(v, c.type, scope))
                        for v, c in zip(values, columns, strict=True)
                    )
                    + ")"
                )
            text = f"{head} VALUES {', '.join(rows)}"
        elif isinstance(source, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
            outs = self.query(source, None)
            if len(outs) != len(columns):
                raise errors.server_error(
                    121,
                    "The select list for the INSERT statement contains more items than the insert "
                    "list. The number of SELECT values must match the number of INSERT columns.",
                )
            for out, column in zip(outs, columns, strict=True):
                if (
                    out.type is not None
                    and out.type != column.type
                    and family(out.type) != family(column.type)
                ):
                    raise errors.not_supported(
                        f"INSERT ... SELECT of a {out.type.sql} value into a {column.type.sql} "
                        "column"
                    )
                if out.type is None and column.type.is_text_encoded:
                    raise errors.not_supported(
                        f"INSERT ... SELECT of an untyped expression into a {column.type.sql} "
                        "column"
                    )
            text = f"{head} {self.sql(source)}"
        else:
            raise errors.not_supported(f"INSERT from {type(source).__name__}")
        sql, slots = self.finish(text)
        return Plan("dml", sql=sql, slots=slots, target=table, writes=True, lock=self.lock)

    def _update(self, node: exp.Update) -> Plan:
        for unsupported in ("from_", "from", "returning", "limit", "order", "joins"):
            if node.args.get(unsupported):
                raise errors.not_supported(f"UPDATE ... {unsupported.rstrip('_').upper()}")
        table = self.target_table(node.this)
        alias = node.this.alias or table.name
        scope = Scope()
        scope.add(Source(alias, [(c.name, c.type) for c in table.columns], table))
        values: dict[str, str] = {}
        for assignment in node.expressions:
            if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
                raise errors.not_supported(f"the SET item {assignment.sql('tsql')[:60]!r}")
            column = table.column(assignment.this.name)
            if column is None:
                raise errors.invalid_column(assignment.this.name)
            if column.identity:
                raise errors.server_error(8102, f"Cannot update identity column '{column.name}'.")
            if column.name in values:
                raise errors.server_error(
                    264,
                    f"The column name '{column.name}' is specified more than once in the SET "
                    "clause or column list of an INSERT.",
                )
            values[column.name] = self.sql(self.assign(assignment.expression, column.type, scope))
        where = node.args.get("where")
        condition = self.sql(self.expr(where.this, scope)[0]) if where is not None else None
        if any(k in values for k in table.key):
            return self._key_update(table, alias, values, condition)
        sets = ", ".join(f"{quote(name)} = {value}" for name, value in values.items())
        text = f"UPDATE {quote(table.physical)} AS {quote(alias)} SET {sets}"
        if condition is not None:
            text += f" WHERE {condition}"
        sql, slots = self.finish(text)
        return Plan("dml", sql=sql, slots=slots, target=table, writes=True, lock=self.lock)

    def _key_update(
        self, table: Table, alias: str, values: dict[str, str], condition: str | None
    ) -> Plan:
        """An UPDATE that sets primary-key columns, run like SQL Server's split update.

        The new rows are computed first (``sql`` fills a temporary table); rows whose key stays
        are then updated in place (change rows 3/4), rows whose key changes are deleted and
        re-inserted (1 then 2, all deletes of the statement before its inserts). The key's
        uniqueness is thus checked at the end of the statement, as in SQL Server
        (``SET id = id + 1`` works).
        """
        a = quote(alias)
        new = [values.get(c.name, f"{a}.{quote(c.name)}") for c in table.columns]
        same = " AND ".join(
            f"({values.get(k, f'{a}.{quote(k)}')}) IS {a}.{quote(k)} COLLATE BINARY"
            for k in table.key
        )
        select = (
            f'SELECT {a}.rowid AS "__rid", CASE WHEN {same} THEN 1 ELSE 0 END AS "__same"'
            + "".join(f', {v} AS "__c{i}"' for i, v in enumerate(new))
            + f" FROM {quote(table.physical)} AS {a}"
        )
        if condition is not None:
            select += f" WHERE {condition}"
        sql, slots = self.finish(select)
        return Plan(
            "dml",
            sql=sql,
            slots=slots,
            target=table,
            updates_key=True,
            writes=True,
            lock=self.lock,
        )

    def _delete(self, node: exp.Delete) -> Plan:
        for unsupported in ("using", "returning", "limit", "order", "tables", "joins"):
            if node.args.get(unsupported):
                raise errors.not_supported(f"DELETE ... {unsupported.upper()}")
        table = self.target_table(node.this)
        alias = node.this.alias or table.name
        scope = Scope()
        scope.add(Source(alias, [(c.name, c.type) for c in table.columns], table))
        text = f"DELETE FROM {quote(table.physical)} AS {quote(alias)}"
        where = node.args.get("where")
        if where is not None:
            text += " WHERE " + self.sql(self.expr(where.this, scope)[0])
        sql, slots = self.finish(text)
        return Plan("dml", sql=sql, slots=slots, target=table, writes=True, lock=self.lock)

    def _truncate(self, node: exp.TruncateTable) -> Plan:
        tables = node.expressions
        if len(tables) != 1:
            raise errors.not_supported("TRUNCATE TABLE of several tables")
        table = self.target_table(tables[0])
        if table.tracked:
            raise errors.server_error(
                4711,
                f"Cannot truncate table '{table.display}' because it is published for replication "
                "or enabled for Change Data Capture.",
            )
        return Plan("dml", sql=f"DELETE FROM {quote(table.physical)}", target=table, writes=True)
