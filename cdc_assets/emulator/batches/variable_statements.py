"""The batch-level statements of variables, as the control tuples the session runs
(:mod:`.variables`): ``DECLARE @v type [= value]``, ``DECLARE @t TABLE (...)``, ``SET @v = ...``
(and ``+=`` ...), ``SELECT @a = x, @b = y ...``, ``INSERT [INTO] @t ...``.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from .. import errors
from .batch_statement import PARAM_PREFIX, Statement, renamed_statement, token_word


def _name_after_at(tokens: list[Token], at: int) -> str:
    """The variable name of ``@name`` whose ``@`` is ``tokens[at]``."""
    if at + 1 >= len(tokens) or tokens[at].end + 1 != tokens[at + 1].start:
        raise errors.server_error(102, "Incorrect syntax near '@'.")
    return tokens[at + 1].text


def _depth_zero_split(tokens: list[Token]) -> list[list[Token]]:
    """``tokens`` cut at the commas outside parentheses."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        kind = token.token_type
        depth += kind == TokenType.L_PAREN
        depth -= kind == TokenType.R_PAREN
        if kind == TokenType.COMMA and depth == 0:
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


def declare_statements(sql: str, tokens: list[Token], counter: list[int]) -> list[Statement]:
    """``DECLARE @v type [= value], @t TABLE (...)``: one statement per variable,
    ``("declare", name, type text, value as a SELECT or None)`` or
    ``("declare_table", name, ((column, type text, nullable), ...))``."""
    out = []
    for item in _depth_zero_split(tokens[1:]):
        if item[0].token_type != TokenType.PARAMETER:
            raise errors.server_error(102, f"Incorrect syntax near '{item[0].text}'.")
        name = _name_after_at(item, 0)
        rest = item[2:]
        if rest and token_word(rest[0]) == "AS":
            rest = rest[1:]
        if not rest:
            raise errors.server_error(102, f"Incorrect syntax near '@{name}'.")
        kind = token_word(rest[0])
        if kind == "CURSOR":
            raise errors.not_supported("cursors (DECLARE ... CURSOR)")
        if kind == "TABLE":
            out.append(
                Statement(
                    text="",
                    control=("declare_table", name, _table_columns(sql, rest[1:])),
                    param_count=0,
                )
            )
            continue
        eq = next((i for i, t in enumerate(rest) if t.token_type == TokenType.EQ), None)
        type_tokens = rest if eq is None else rest[:eq]
        type_text = sql[type_tokens[0].start : type_tokens[-1].end + 1]
        value: Statement | None = None
        if eq is not None:
            if eq + 1 >= len(rest):
                raise errors.server_error(102, "Incorrect syntax near '='.")
            expression = renamed_statement(sql, rest[eq + 1 :], counter)
            value = Statement(f"SELECT {expression.text}", None, expression.param_count)
        out.append(
            Statement(
                text="",
                control=("declare", name, type_text, value),
                param_count=value.param_count if value else 0,
            )
        )
    return out


_CONSTRAINT_WORDS = ("NULL", "NOT", "PRIMARY", "UNIQUE", "DEFAULT", "IDENTITY", "CHECK")
_TABLE_CONSTRAINTS = ("PRIMARY", "UNIQUE", "CHECK", "INDEX", "CONSTRAINT", "FOREIGN")


def _table_columns(sql: str, tokens: list[Token]) -> tuple[tuple[str, str, bool], ...]:
    if (
        len(tokens) < 2
        or tokens[0].token_type != TokenType.L_PAREN
        or tokens[-1].token_type != TokenType.R_PAREN
    ):
        raise errors.server_error(102, "Incorrect syntax near 'TABLE'.")
    columns = []
    for definition in _depth_zero_split(tokens[1:-1]):
        words = [token_word(t) for t in definition]
        if words[0] in _TABLE_CONSTRAINTS or len(definition) < 2:
            continue  # table constraints are not enforced on table variables here
        name = definition[0].text
        end = next(
            (i for i in range(1, len(words)) if words[i] in (*_CONSTRAINT_WORDS, "COLLATE")),
            len(definition),
        )
        type_text = sql[definition[1].start : definition[end - 1].end + 1]
        flags = " ".join(words[end:])
        nullable = "NOT NULL" not in flags and "PRIMARY KEY" not in flags
        columns.append((name, type_text, nullable))
    if not columns:
        raise errors.server_error(102, "Incorrect syntax near ')'.")
    return tuple(columns)


_COMPOUND = {TokenType.PLUS: "+", TokenType.DASH: "-", TokenType.STAR: "*", TokenType.SLASH: "/"}


def set_variable_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``SET @v = expression`` (or ``+=``, ``-=``, ``*=``, ``/=``):
    ``("assign", (name,), SELECT expression)``."""
    name = _name_after_at(tokens, 1)
    at = 3
    operator = ""
    if at < len(tokens) and tokens[at].token_type in _COMPOUND:
        operator = _COMPOUND[tokens[at].token_type]
        at += 1
    if at >= len(tokens) - 1 or tokens[at].token_type != TokenType.EQ:
        raise errors.server_error(102, f"Incorrect syntax near '@{name}'.")
    expression = renamed_statement(sql, tokens[at + 1 :], counter)
    text = expression.text if not operator else f"@{name} {operator} ({expression.text})"
    select = Statement(f"SELECT {text}", None, expression.param_count)
    return Statement(text="", control=("assign", (name,), select), param_count=select.param_count)


def assigns_variables(tokens: list[Token]) -> bool:
    """A SELECT with ``@v =`` in it (a variable assignment, checked by parsing)."""
    for i in range(len(tokens) - 2):
        if (
            tokens[i].token_type == TokenType.PARAMETER
            and (i == 0 or tokens[i - 1].token_type != TokenType.PARAMETER)
            and tokens[i + 1].token_type != TokenType.PARAMETER
            and tokens[i + 2].token_type == TokenType.EQ
        ):
            return True
    return False


def select_assignment(statement: Statement) -> Statement:
    """``SELECT @a = x, @b = y [FROM ...]``: ``("assign", (a, b), SELECT x, y [FROM ...])``."""
    try:
        node = sqlglot.parse_one(statement.text, read="tsql")
    except sqlglot.errors.ParseError:
        return statement  # the planner reports the syntax error
    if not isinstance(node, exp.Select):
        return statement
    names: list[str] = []
    values: list[exp.Expression] = []
    for projection in node.expressions:
        target = projection.this if isinstance(projection, exp.EQ) else None
        if isinstance(target, exp.Parameter) and not isinstance(target.this, exp.Parameter):
            name = target.name
            if not name.startswith(PARAM_PREFIX):
                names.append(name)
                values.append(projection.expression)
                continue
        values.append(projection)
    if not names:
        return statement
    if len(names) != len(values):
        raise errors.server_error(
            141,
            "A SELECT statement that assigns a value to a variable must not be combined with "
            "data-retrieval operations.",
        )
    node.set("expressions", values)
    select = Statement(node.sql(dialect="tsql"), None, statement.param_count)
    return Statement(
        text="", control=("assign", tuple(names), select), param_count=select.param_count
    )


def insert_variable_statement(
    sql: str, tokens: list[Token], at: int, counter: list[int]
) -> Statement:
    """``INSERT [INTO] @t [(columns)] {EXEC ... | SELECT ... | VALUES ...}``:
    ``("insert_variable", name, columns or None, source)`` (the source an EXEC or a query)."""
    name = _name_after_at(tokens, at)
    j = at + 2
    columns: tuple[str, ...] | None = None
    if j < len(tokens) and tokens[j].token_type == TokenType.L_PAREN:
        close = next(
            (k for k in range(j, len(tokens)) if tokens[k].token_type == TokenType.R_PAREN), None
        )
        if close is None:
            raise errors.server_error(102, "Incorrect syntax near '('.")
        columns = tuple(t.text for t in tokens[j + 1 : close] if t.token_type != TokenType.COMMA)
        j = close + 1
    if j >= len(tokens):
        raise errors.server_error(102, f"Incorrect syntax near '@{name}'.")
    source = renamed_statement(sql, tokens[j:], counter)
    if token_word(tokens[j]) == "VALUES":
        source = Statement(_values_as_select(source.text), None, source.param_count)
    return Statement(
        text="",
        control=("insert_variable", name, columns, source),
        param_count=source.param_count,
    )


def _values_as_select(text: str) -> str:
    """``VALUES (a, b), (c, d)`` as ``SELECT a, b UNION ALL SELECT c, d``."""
    try:
        node = sqlglot.parse_one(f"INSERT INTO __values {text}", read="tsql")
    except sqlglot.errors.ParseError as exc:
        raise errors.server_error(102, f"Incorrect syntax: {exc}") from None
    values = node.expression
    if not isinstance(values, exp.Values):
        raise errors.server_error(102, "Incorrect syntax near 'VALUES'.")
    selects = [exp.Select(expressions=list(row.expressions)) for row in values.expressions]
    query: exp.Expression = selects[0]
    for select in selects[1:]:
        query = exp.union(query, select, distinct=False)
    return query.sql(dialect="tsql")
