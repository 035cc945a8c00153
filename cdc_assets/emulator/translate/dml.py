"""INSERT, UPDATE, DELETE and TRUNCATE TABLE, with values converted like SQL Server's.

A value written to a column (``VALUES``, ``SET``) is converted to the column's type as SQL Server
converts it, or refused when the emulator cannot convert it exactly (pass it as a parameter). An
UPDATE that sets primary-key columns runs like SQL Server's split update (see
:func:`key_update`).
"""

from __future__ import annotations

from sqlglot import exp

from .. import errors
from ..catalog.catalog import EmulatedTable
from ..catalog.storage import quote
from ..values.types import SqlType
from . import statements
from .plan import Plan
from .scope import Scope, Source
from .translate import Translator
from .type_rules import Want, family


def assign(tr: Translator, node: exp.Expression, target: SqlType, scope: Scope) -> exp.Expression:
    """Translate a value written to a column of type ``target``, converting like SQL Server."""
    if tr.is_value(node):
        return tr.value(node, Want(target, assign=True))[0]
    if isinstance(node, exp.Var) and node.name.upper() == "DEFAULT":
        raise errors.not_supported("DEFAULT in a VALUES list or SET clause")
    new, t = tr.expr(node, scope, Want(target, assign=True))
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
                f"assigning the expression {tr.quote(node)} to a {target.sql} column; "
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


def target_table(tr: Translator, node: exp.Table) -> EmulatedTable:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise errors.not_supported(f"writing to {tr.quote(node)}")
    tr.table_hints(node)
    table = tr.catalog.resolve(node.name, node.db or None, node.catalog or None, tr.db_name)
    if table.kind != "user":
        raise errors.not_supported(f"writing to the system object {table.display}")
    return table


def _refuse(tr: Translator, node: exp.Expression, verb: str, clauses: tuple[str, ...]) -> None:
    """NotSupportedError for the first of ``clauses`` (sqlglot arg names) the statement has,
    quoting the clause as the user wrote it (``OUTPUT inserted.a``, ``TOP (1)``)."""
    for clause in clauses:
        value = node.args.get(clause)
        if value:
            part = value[0] if isinstance(value, list) else value
            shown = tr.quote(part) if isinstance(part, exp.Expression) else clause.upper()
            raise errors.not_supported(f"{verb} with {shown}")


def _target_scope(tr: Translator, node: exp.Table) -> tuple[EmulatedTable, str, Scope]:
    """The table an UPDATE / DELETE writes, its exposed name, and a scope holding it."""
    table = target_table(tr, node)
    alias = node.alias or table.name
    scope = Scope()
    scope.add(Source(alias, [(c.name, c.type) for c in table.columns], table))
    return table, alias, scope


@statements.planner(exp.Insert)
def plan_insert(tr: Translator, node: exp.Insert, _text: str) -> Plan:
    _refuse(tr, node, "INSERT", ("returning", "conflict", "overwrite"))
    target = node.this
    column_nodes: list[exp.Expression] = []
    if isinstance(target, exp.Schema):
        column_nodes = list(target.expressions)
        target = target.this
    table = target_table(tr, target)
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
                    tr.sql(assign(tr, v, c.type, scope))
                    for v, c in zip(values, columns, strict=True)
                )
                + ")"
            )
        text = f"{head} VALUES {', '.join(rows)}"
    elif isinstance(source, (exp.Select, exp.Union, exp.Except, exp.Intersect)):
        outs = tr.query(source, None)
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
                    f"INSERT ... SELECT of a {out.type.sql} value into a {column.type.sql} column"
                )
            if out.type is None and column.type.is_text_encoded:
                raise errors.not_supported(
                    f"INSERT ... SELECT of an untyped expression into a {column.type.sql} column"
                )
        text = f"{head} {tr.sql(source)}"
    else:
        raise errors.not_supported(f"INSERT from {tr.quote(source)}")
    sql, slots = tr.finish(text)
    return Plan("dml", verb="INSERT", sql=sql, slots=slots, target=table, writes=True, lock=tr.lock)


@statements.planner(exp.Update)
def plan_update(tr: Translator, node: exp.Update, _text: str) -> Plan:
    _refuse(tr, node, "UPDATE", ("from_", "from", "returning", "limit", "order", "joins"))
    table, alias, scope = _target_scope(tr, node.this)
    values: dict[str, str] = {}
    for assignment in node.expressions:
        if not isinstance(assignment, exp.EQ) or not isinstance(assignment.this, exp.Column):
            raise errors.not_supported(f"the SET item {tr.quote(assignment)}")
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
        values[column.name] = tr.sql(assign(tr, assignment.expression, column.type, scope))
    where = node.args.get("where")
    condition = tr.sql(tr.expr(where.this, scope)[0]) if where is not None else None
    if any(k in values for k in table.key):
        return key_update(tr, table, alias, values, condition)
    sets = ", ".join(f"{quote(name)} = {value}" for name, value in values.items())
    text = f"UPDATE {quote(table.physical)} AS {quote(alias)} SET {sets}"
    if condition is not None:
        text += f" WHERE {condition}"
    sql, slots = tr.finish(text)
    return Plan("dml", verb="UPDATE", sql=sql, slots=slots, target=table, writes=True, lock=tr.lock)


def key_update(
    tr: Translator, table: EmulatedTable, alias: str, values: dict[str, str], condition: str | None
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
        f"({values.get(k, f'{a}.{quote(k)}')}) IS {a}.{quote(k)} COLLATE BINARY" for k in table.key
    )
    select = (
        f'SELECT {a}.rowid AS "__rid", CASE WHEN {same} THEN 1 ELSE 0 END AS "__same"'
        + "".join(f', {v} AS "__c{i}"' for i, v in enumerate(new))
        + f" FROM {quote(table.physical)} AS {a}"
    )
    if condition is not None:
        select += f" WHERE {condition}"
    sql, slots = tr.finish(select)
    return Plan(
        "dml",
        sql=sql,
        slots=slots,
        target=table,
        verb="UPDATE",
        updates_key=True,
        writes=True,
        lock=tr.lock,
    )


@statements.planner(exp.Delete)
def plan_delete(tr: Translator, node: exp.Delete, _text: str) -> Plan:
    _refuse(tr, node, "DELETE", ("using", "returning", "limit", "order", "tables", "joins"))
    table, alias, scope = _target_scope(tr, node.this)
    text = f"DELETE FROM {quote(table.physical)} AS {quote(alias)}"
    where = node.args.get("where")
    if where is not None:
        text += " WHERE " + tr.sql(tr.expr(where.this, scope)[0])
    sql, slots = tr.finish(text)
    return Plan("dml", verb="DELETE", sql=sql, slots=slots, target=table, writes=True, lock=tr.lock)


@statements.planner(exp.TruncateTable)
def plan_truncate(tr: Translator, node: exp.TruncateTable, _text: str) -> Plan:
    tables = node.expressions
    if len(tables) != 1:
        raise errors.not_supported("TRUNCATE TABLE of several tables")
    table = target_table(tr, tables[0])
    if table.tracked:
        raise errors.server_error(
            4711,
            f"Cannot truncate table '{table.display}' because it is published for replication "
            "or enabled for Change Data Capture.",
        )
    return Plan(
        "dml", verb="DELETE", sql=f"DELETE FROM {quote(table.physical)}", target=table, writes=True
    )
