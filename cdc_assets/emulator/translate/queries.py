"""Queries: SELECT, UNION / EXCEPT / INTERSECT, CTEs, ORDER BY / TOP / OFFSET, FROM items.

Every table is resolved (``[dbo].[t]`` -> ``"dbo.t"``, ``sys.*`` views, ``cdc.*`` tables,
``msdb.dbo.cdc_jobs``; unknown -> error 208), ``*`` is expanded, the change functions
``cdc.fn_cdc_get_all_changes_<ci>`` / ``..._net_changes_<ci>`` become SQLite subqueries, table
hints decide whether the statement takes the table lock, and the result columns (name, SQL Server
type, Python type) are recorded for ``cursor.description``; result columns that need a converter
get a SQLite alias ``"<n> [EMU_...]"`` so sqlite3 converts them in C (``PARSE_COLNAMES``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlglot import exp

from .. import errors
from ..cdc import functions
from ..values import types as T
from . import statements
from .plan import Plan, ResultColumn
from .scope import Out, Scope, Source
from .translator_core import TranslatorCore, ident
from .type_rules import Want, family

TableFunction = Callable[
    ["QueryTranslation", exp.Expression, list[exp.Expression], Scope],
    tuple[str, list[tuple[str, "T.SqlType | None"]]],
]
"""A table-valued function of the ``sys`` schema: given the translator, the call, its arguments
and the scope, the SQLite text of its rows (a SELECT) and its typed result columns."""

TABLE_FUNCTIONS: dict[str, TableFunction] = {}
"""``sys`` table-valued functions by lower-case name (``fn_listextendedproperty``), callable as
``sys.<name>(...)`` or ``<name>(...)``; other modules register theirs here."""

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


class QueryTranslation(TranslatorCore):
    """The query section of :class:`.translate.Translator`."""

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
            first = [
                p.this if isinstance(p, exp.Alias) else p for p in self._leftmost(node).expressions
            ]
            first = [p.copy() for p in first]
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
            self._order_and_limit(node, scope, outs, first)
            if top:
                self._alias_converters(self._leftmost(node), outs)
            return outs
        raise errors.not_supported(f"{self.quote(node)} as a query")

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
        if node.args.get("for_") or node.args.get("for"):  # FOR XML / FOR JSON / FOR BROWSE
            raise errors.not_supported("SELECT ... FOR XML / FOR JSON")
        from_ = node.args.get("from_") or node.args.get("from")
        if from_ is not None:
            from_.set("this", self.source(from_.this, scope))
        for join in node.args.get("joins") or []:
            if join.args.get("using"):
                raise errors.not_supported("JOIN ... USING")
            join.set("this", self.source(join.this, scope))
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
                    projections.append(exp.Alias(this=new, alias=ident(alias_name)))
                elif isinstance(new, exp.Column) and name:
                    projections.append(new)
                else:
                    projections.append(exp.Alias(this=new, alias=ident(name or f"__c{len(outs)}")))
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
            projections[i] = exp.Alias(this=inner, alias=ident(f"c{i} [{converter}]"))
            changed = True
        if changed:
            select.set("expressions", projections)

    def _order_and_limit(
        self,
        node: exp.Expression,
        scope: Scope,
        outs: list[Out],
        first: list[exp.Expression] | None = None,
    ) -> None:
        """``first``: of a UNION/INTERSECT/EXCEPT, its first query's select list (as written),
        which an ORDER BY item must name, by output name or by the same column expression."""
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
                elif first is not None:
                    new = exp.Literal.number(_set_order_position(target, first))
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
                exp.Column(this=ident(name), table=ident(source.alias))
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
                exp.Column(this=ident(name), table=ident(source.alias))
                for name, _ in source.columns
            ]
        return [projection]

    # -- FROM items -----------------------------------------------------------------------------
    def source(self, node: exp.Expression, scope: Scope) -> exp.Expression:
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
                exp.TableAlias(this=ident(alias), columns=[ident(c) for c in cols] or None),
            )
            return node
        if isinstance(node, exp.Lateral):
            raise errors.not_supported("CROSS APPLY / OUTER APPLY")
        if isinstance(node, exp.Values):
            raise errors.not_supported("VALUES as a table source")
        raise errors.not_supported(f"{self.quote(node)} in FROM")

    def table_hints(self, node: exp.Table) -> None:
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
        self.table_hints(node)
        target = node.this
        if node.args.get("pivots"):
            raise errors.not_supported(f"PIVOT / UNPIVOT ({self.quote(node.args['pivots'][0])})")
        if node.args.get("sample"):
            raise errors.not_supported(f"TABLESAMPLE ({self.quote(node.args['sample'])})")
        if self.param_index(target) is not None:
            raise errors.not_supported("a parameter (?) as a table name")
        alias = node.alias
        if isinstance(target, (exp.Anonymous, exp.Func)):
            return self._table_function(node, target, scope)
        if isinstance(target, exp.Parameter):  # FROM @t: a table variable of the batch
            table = self.variables.table(target.name)
            exposed = alias or table.name
            scope.add(Source(exposed, [(c.name, c.type) for c in table.columns], table))
            return exp.Table(this=ident(table.physical), alias=exp.TableAlias(this=ident(exposed)))
        name = node.name
        schema = node.db or None
        database = node.catalog or None
        if not schema and not database and name.lower() in scope.ctes:
            columns = scope.ctes[name.lower()]
            scope.add(Source(alias or name, list(columns)))
            node.set("this", ident(name))
            if alias:
                node.set("alias", exp.TableAlias(this=ident(alias)))
            return node
        table = self.catalog.resolve(name, schema, database, self.db_name)
        exposed = alias or table.name
        scope.add(Source(exposed, [(c.name, c.type) for c in table.columns], table))
        return exp.Table(this=ident(table.physical), alias=exp.TableAlias(this=ident(exposed)))

    def _table_function(
        self, node: exp.Table, call: exp.Expression, scope: Scope
    ) -> exp.Expression:
        # a function sqlglot knows by another name (OPENJSON): the name as the user wrote it
        name = call.name if isinstance(call, exp.Anonymous) else self.call_name(call)
        schema = (node.db or "").lower()
        lname = name.lower()
        display = f"{node.db}.{name}" if node.db else name
        builtin = TABLE_FUNCTIONS.get(lname) if isinstance(call, exp.Anonymous) else None
        if builtin is not None and schema in ("", "sys"):
            snippet, columns = builtin(self, call, list(call.expressions), scope)
            alias = node.alias or name
            scope.add(Source(alias, columns))
            marker = f"__emu_raw_{len(self.raw)}"
            self.raw.append(snippet)
            return exp.Table(this=ident(marker), alias=exp.TableAlias(this=ident(alias)))
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
        return exp.Table(this=ident(marker), alias=exp.TableAlias(this=ident(alias)))


_FROM = re.compile(r"\bFROM\b", re.IGNORECASE)


def _set_order_position(target: exp.Expression, first: list[exp.Expression]) -> int:
    """The select-list position an ORDER BY item of a set operation names (error 104 if none)."""
    for position, projection in enumerate(first, start=1):
        if (
            isinstance(target, exp.Column)
            and isinstance(projection, exp.Column)
            and target.name.lower() == projection.name.lower()
            and target.table.lower() == projection.table.lower()
        ):
            return position
    raise errors.server_error(
        104,
        "ORDER BY items must appear in the select list if the statement contains a UNION, "
        "INTERSECT or EXCEPT operator.",
    )


@statements.planner(exp.Select, exp.Union, exp.Except, exp.Intersect)
def plan_query(tr: QueryTranslation, node: exp.Expression, _text: str) -> Plan:
    outs = tr.query(node, None, top=True)
    sql, slots = tr.finish(tr.sql(node))
    columns = tuple(ResultColumn(o.name, o.type, o.python_type) for o in outs)
    # read from the SQLite text, not the tables resolved: a function may read one (OBJECT_ID,
    # sys.fn_cdc_get_max_lsn() are subqueries of the catalog or the CDC tables)
    reads_table = _FROM.search(sql) is not None
    return Plan(
        "query", sql=sql, slots=slots, columns=columns, lock=tr.lock, reads_table=reads_table
    )
