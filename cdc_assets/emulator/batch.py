"""Split a T-SQL batch into statements and recognise what sqlglot cannot parse.

A batch may hold several statements separated by ``;`` — or, for transaction control, by line
breaks only (``BEGIN TRAN`` / ``SELECT 1`` / ``COMMIT``). Each ``?`` parameter is renamed to a
T-SQL variable ``@__p<n>`` (n = its position in the whole batch), because sqlglot parses
variables in places where it rejects ``?`` (``FETCH NEXT ? ROWS``) and because the renamed marker
survives rewriting, so parameters can be re-ordered for the SQLite text.

sqlglot's tsql dialect does not parse ``SAVE TRANSACTION``, ``SET TRANSACTION ISOLATION LEVEL`` or
``ALTER DATABASE``; those, and all transaction control, are recognised here from the tokens.

Statements need no ``;`` between them (``SET IMPLICIT_TRANSACTIONS OFF IF @@TRANCOUNT > 0 COMMIT
TRAN`` is three): a statement ends where a word that starts another one appears outside
parentheses and CASE (the rules of :meth:`_Parser._simple_end`). ``IF ... ELSE`` and ``BEGIN ...
END`` nest. The batch-level statements of variables (``DECLARE``, ``SET @v``, ``SELECT @v =``,
``INSERT INTO @t``) and ``USE`` become control tuples run by the session (:mod:`.variables`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.dialects.tsql import TSQL
from sqlglot.tokens import Token, TokenType

from . import errors

PARAM_PREFIX = "__p"

_TRAN_WORDS = {"TRAN", "TRANSACTION", "WORK"}
_NOOP_SET_OPTIONS = {
    "NOCOUNT",
    "XACT_ABORT",
    "ANSI_NULLS",
    "ANSI_PADDING",
    "ANSI_WARNINGS",
    "QUOTED_IDENTIFIER",
    "ARITHABORT",
    "CONCAT_NULL_YIELDS_NULL",
    "ANSI_NULL_DFLT_ON",
    "TEXTSIZE",
    "DATEFORMAT",
    "DEADLOCK_PRIORITY",
}
_LEVELS = {
    "READ COMMITTED": "READ COMMITTED",
    "READ UNCOMMITTED": "READ COMMITTED",
    "SNAPSHOT": "SNAPSHOT",
    "REPEATABLE READ": "REPEATABLE READ",
    "SERIALIZABLE": "SERIALIZABLE",
}


@dataclass(frozen=True)
class Statement:
    """One statement of a batch.

    ``control`` is set for statements handled without sqlglot, e.g. ``("begin", None)``,
    ``("commit",)``, ``("rollback", name)``, ``("save", name)``, ``("isolation", level)``,
    ``("allow_snapshot", True)``, ``("noop",)``, ``("lock_timeout", ms)``,
    ``("implicit_transactions", on)``, ``("if", test, then, else)``, ``("block", statements)``,
    ``("declare", name, type text, value)``, ``("declare_table", name, columns)``,
    ``("assign", names, select)``, ``("insert_variable", name, columns, source)``,
    ``("use", database)``. Otherwise ``text`` is the statement with parameters renamed, ready for
    sqlglot.
    """

    text: str
    control: tuple[object, ...] | None
    param_count: int


def param_name(index: int) -> str:
    return f"{PARAM_PREFIX}{index}"


@lru_cache(maxsize=2048)
def split(sql: str) -> tuple[Statement, ...]:
    """Split ``sql`` into statements (cached: the same texts are sent again and again)."""
    try:
        tokens = TSQL().tokenize(sql)
    except Exception as exc:  # the tokenizer's error type varies across sqlglot versions
        raise errors.server_error(102, f"Incorrect syntax: {exc}") from None
    return tuple(_Parser(sql, tokens).batch())


def _word(token: Token) -> str:
    return token.text.upper() if token.token_type != TokenType.IDENTIFIER else ""


_NOT_WORDS = {
    TokenType.IDENTIFIER,
    TokenType.STRING,
    TokenType.NATIONAL_STRING,
    TokenType.NUMBER,
    TokenType.PARAMETER,
    TokenType.PLACEHOLDER,
}


def _keywords(tokens: list[Token]) -> list[str]:
    """Each token's keyword (upper case), or "" for names, literals, variables and ``x.word``."""
    words = []
    for i, token in enumerate(tokens):
        previous = tokens[i - 1].token_type if i else None
        if token.token_type in _NOT_WORDS or previous in (TokenType.DOT, TokenType.PARAMETER):
            words.append("")
        else:
            words.append(token.text.upper())
    return words


def _control_length(tokens: list[Token], i: int) -> int:
    """If a transaction-control statement starts at ``tokens[i]``, return its token count."""
    word = _word(tokens[i])
    n = len(tokens)

    def next_word(j: int) -> str:
        return _word(tokens[j]) if j < n else ""

    def optional_name(j: int) -> int:
        if j < n and tokens[j].token_type in (TokenType.VAR, TokenType.IDENTIFIER):
            return j + 1
        return j

    if word == "BEGIN" and next_word(i + 1) in ("TRAN", "TRANSACTION"):
        return optional_name(i + 2) - i
    if word in ("COMMIT", "ROLLBACK"):
        j = i + 1
        if next_word(j) in _TRAN_WORDS:
            j = optional_name(j + 1)
        return j - i
    if word == "SAVE" and next_word(i + 1) in ("TRAN", "TRANSACTION"):
        return optional_name(i + 2) - i
    if word == "SET" and next_word(i + 1) == "TRANSACTION" and next_word(i + 2) == "ISOLATION":
        j = i + 4
        while j < n and next_word(j) in (
            "READ",
            "COMMITTED",
            "UNCOMMITTED",
            "SNAPSHOT",
            "REPEATABLE",
            "SERIALIZABLE",
        ):
            j += 1
        return j - i
    return 0


# words that always start a statement (T-SQL needs no ';' between statements)
_ALWAYS_NEW = frozenset(
    [
        *("DECLARE", "IF", "USE", "PRINT", "RETURN", "BEGIN", "COMMIT", "ROLLBACK", "SAVE"),
        *("TRUNCATE", "WHILE", "RAISERROR", "THROW", "BREAK", "CONTINUE", "WAITFOR"),
    ]
)
# words that start the statement an IF runs (its condition ends before the first at depth 0)
_STATEMENT_WORDS = frozenset(
    [
        *_ALWAYS_NEW - {"IF"},
        *("IF", "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "SET", "EXEC", "EXECUTE"),
        *("CREATE", "DROP", "ALTER", "WITH"),
    ]
)
_SELECT_CONTINUES = ("UNION", "ALL", "EXCEPT", "INTERSECT", "AS", "FOR")
_GRANTS = ("GRANT", "DENY", "REVOKE")
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE")
_BLOCK_NOT = ("TRAN", "TRANSACTION", "DISTRIBUTED", "TRY", "CATCH", "DIALOG", "CONVERSATION")


class _Parser:
    """Statements of a batch, with IF ... ELSE and BEGIN ... END blocks nested."""

    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.words = _keywords(tokens)
        self.i = 0
        self.counter = [0]  # ``?`` markers renamed so far

    def batch(self) -> list[Statement]:
        statements = self._until(())
        if self.i < len(self.tokens):
            word = self.words[self.i] or self.tokens[self.i].text
            raise errors.server_error(156, f"Incorrect syntax near the keyword '{word}'.")
        return statements

    def _skip_semicolons(self) -> None:
        while self.i < len(self.tokens) and self.tokens[self.i].token_type == TokenType.SEMICOLON:
            self.i += 1

    def _until(self, stop: tuple[str, ...]) -> list[Statement]:
        out: list[Statement] = []
        while True:
            self._skip_semicolons()
            if self.i >= len(self.tokens) or self.words[self.i] in (*stop, "END", "ELSE"):
                return out
            out.extend(self._one())

    def _one(self) -> list[Statement]:
        """The statement at ``self.i`` (an IF or a block counts as one)."""
        word = self.words[self.i]
        following = self.words[self.i + 1] if self.i + 1 < len(self.tokens) else ""
        if word == "IF":
            return [self._if()]
        if word == "BEGIN" and following in ("TRY", "CATCH"):
            raise errors.not_supported("BEGIN TRY ... END TRY / BEGIN CATCH ... END CATCH")
        if word == "BEGIN" and following not in _BLOCK_NOT:
            self.i += 1
            body = self._until(())
            if self.i >= len(self.tokens) or self.words[self.i] != "END":
                raise errors.server_error(
                    102, "Incorrect syntax near the end of the batch: BEGIN without END."
                )
            if not body:
                raise errors.server_error(102, "Incorrect syntax near 'END'.")
            self.i += 1
            return [_block(body)]
        if word == "WHILE":
            raise errors.not_supported("WHILE loops")
        length = _control_length(self.tokens, self.i)
        end = self.i + length if length else self._simple_end(self.i)
        part = self.tokens[self.i : end]
        self.i = end
        return _simple(self.sql, part, self.counter)

    def _if(self) -> Statement:
        """``IF condition statement [ELSE statement]``: ``("if", test, then, else)``, the test a
        SELECT of 1 or 0; each branch one statement or a BEGIN ... END block."""
        start = self.i + 1
        depth, j = 0, start
        while j < len(self.tokens):
            kind = self.tokens[j].token_type
            depth += kind == TokenType.L_PAREN
            depth -= kind == TokenType.R_PAREN
            if depth == 0 and j > start and self.words[j] in _STATEMENT_WORDS:
                break
            j += 1
        if j >= len(self.tokens):
            raise errors.server_error(102, "Incorrect syntax near the end of the IF statement.")
        condition = _statement(self.sql, self.tokens[start:j], self.counter)
        test = Statement(
            text=f"SELECT CASE WHEN {condition.text} THEN 1 ELSE 0 END",
            control=None,
            param_count=condition.param_count,
        )
        self.i = j
        then = _block(self._one())
        self._skip_semicolons()
        otherwise: Statement | None = None
        if self.i < len(self.tokens) and self.words[self.i] == "ELSE":
            self.i += 1
            self._skip_semicolons()
            if self.i >= len(self.tokens):
                raise errors.server_error(102, "Incorrect syntax near 'ELSE'.")
            otherwise = _block(self._one())
        count = test.param_count + then.param_count + (otherwise.param_count if otherwise else 0)
        return Statement(text=self.sql, control=("if", test, then, otherwise), param_count=count)

    def _simple_end(self, start: int) -> int:
        """Where the statement starting at ``start`` ends: at ``;``, at END / ELSE of an
        enclosing block, or where the next statement begins."""
        first = self.words[start]
        main = first if first != "WITH" else ""  # a CTE's statement: the first DML word
        seen_set = seen_body = False
        depth = cases = 0
        j = start + 1
        while j < len(self.tokens):
            kind = self.tokens[j].token_type
            word = self.words[j]
            previous = self.words[j - 1]
            if kind == TokenType.L_PAREN:
                depth += 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
            elif depth == 0 and word == "CASE":
                cases += 1
            elif depth == 0 and word == "END" and cases:
                cases -= 1
            elif depth == 0 and cases == 0:
                if kind == TokenType.SEMICOLON or word in ("END", "ELSE"):
                    return j
                if not main and word in _DML:
                    main = word
                elif word in _ALWAYS_NEW and not (word == "IF" and first in ("DROP", "ALTER")):
                    return j  # (DROP TABLE IF EXISTS, ALTER TABLE ... DROP COLUMN IF EXISTS)
                elif word == "SET":
                    if main not in ("UPDATE", "ALTER", "MERGE") or seen_set:
                        return j
                    seen_set = True
                elif word == "SELECT":
                    if main == "INSERT" and not seen_body:
                        seen_body = True
                    elif previous not in _SELECT_CONTINUES and first not in _GRANTS:
                        return j
                elif word in ("VALUES", "DEFAULT") and main == "INSERT":
                    seen_body = True
                elif word in ("EXEC", "EXECUTE"):
                    if main == "INSERT" and not seen_body:
                        seen_body = True
                    elif first not in _GRANTS:
                        return j
                elif word in ("INSERT", "UPDATE", "DELETE", "MERGE"):
                    if (
                        main != "MERGE"
                        and first not in _GRANTS
                        and previous not in ("ON", "FOR", "AFTER", "OF", "INSTEAD", ",")
                    ):
                        return j
                elif word in ("CREATE", "DROP", "ALTER") and first != "ALTER":
                    return j
            j += 1
        return j


def _block(statements: list[Statement]) -> Statement:
    if len(statements) == 1:
        return statements[0]
    count = sum(s.param_count for s in statements)
    return Statement(text="", control=("block", tuple(statements)), param_count=count)


def _simple(sql: str, tokens: list[Token], counter: list[int]) -> list[Statement]:
    """One statement without IF or blocks; the batch-level ones are recognised here:
    ``DECLARE``, ``SET @v = ...``, ``SELECT @v = ...``, ``INSERT INTO @t ...`` and ``USE``."""
    words = _keywords(tokens)
    first = words[0]
    if first == "DECLARE":
        return _declare(sql, tokens, counter)
    if (
        first == "SET"
        and len(tokens) > 2
        and tokens[1].token_type == TokenType.PARAMETER
        and tokens[2].token_type != TokenType.PARAMETER  # not SET @@OPTION
    ):
        return [_set_variable(sql, tokens, counter)]
    if first == "INSERT":
        at = 2 if len(words) > 1 and words[1] == "INTO" else 1
        if at < len(tokens) and tokens[at].token_type == TokenType.PARAMETER:
            return [_insert_variable(sql, tokens, at, counter)]
    if first == "USE" and len(tokens) == 2:
        return [Statement(text="", control=("use", tokens[1].text), param_count=0)]
    statement = _statement(sql, tokens, counter)
    if first == "SELECT" and _assigns(tokens):
        return [_select_assignment(statement)]
    return [statement]


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


def _declare(sql: str, tokens: list[Token], counter: list[int]) -> list[Statement]:
    """``DECLARE @v type [= value], @t TABLE (...)``: one statement per variable,
    ``("declare", name, type text, value as a SELECT or None)`` or
    ``("declare_table", name, ((column, type text, nullable), ...))``."""
    out = []
    for item in _depth_zero_split(tokens[1:]):
        if item[0].token_type != TokenType.PARAMETER:
            raise errors.server_error(102, f"Incorrect syntax near '{item[0].text}'.")
        name = _name_after_at(item, 0)
        rest = item[2:]
        if rest and _word(rest[0]) == "AS":
            rest = rest[1:]
        if not rest:
            raise errors.server_error(102, f"Incorrect syntax near '@{name}'.")
        kind = _word(rest[0])
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
            expression = _statement(sql, rest[eq + 1 :], counter)
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
        words = [_word(t) for t in definition]
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


def _set_variable(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
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
    expression = _statement(sql, tokens[at + 1 :], counter)
    text = expression.text if not operator else f"@{name} {operator} ({expression.text})"
    select = Statement(f"SELECT {text}", None, expression.param_count)
    return Statement(text="", control=("assign", (name,), select), param_count=select.param_count)


def _assigns(tokens: list[Token]) -> bool:
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


def _select_assignment(statement: Statement) -> Statement:
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


def _insert_variable(sql: str, tokens: list[Token], at: int, counter: list[int]) -> Statement:
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
    source = _statement(sql, tokens[j:], counter)
    if _word(tokens[j]) == "VALUES":
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


def _statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    control = _control(tokens)
    start = tokens[0].start
    out: list[str] = []
    pos = start
    count = 0
    previous: Token | None = None
    for token in tokens:
        if token.token_type == TokenType.PLACEHOLDER:
            out.append(sql[pos : token.start])
            marker = f"@{param_name(counter[0])}"
            if previous is not None and _word(previous) in ("NEXT", "FIRST"):
                marker = f"({marker})"
            out.append(marker)
            pos = token.end + 1
            counter[0] += 1
            count += 1
        previous = token
    end = tokens[-1].end + 1
    # a trailing string/identifier token ends at its closing quote; keep the raw text up to it
    out.append(sql[pos:end])
    text = "".join(out)
    return Statement(text=text, control=control, param_count=count)


def _control(tokens: list[Token]) -> tuple[object, ...] | None:
    words = [_word(t) for t in tokens]
    first = words[0]
    names = [t.text for t in tokens]
    if first == "BEGIN" and len(words) > 1 and words[1] in ("TRAN", "TRANSACTION"):
        return ("begin", names[2] if len(names) > 2 else None)
    if first == "BEGIN" and len(words) > 1 and words[1] == "DISTRIBUTED":
        raise errors.not_supported("distributed transactions")
    if first == "COMMIT":
        return ("commit",)
    if first == "ROLLBACK":
        name = names[2] if len(names) > 2 and words[1] in _TRAN_WORDS else None
        return ("rollback", name)
    if first == "SAVE" and len(words) > 2 and words[1] in ("TRAN", "TRANSACTION"):
        if tokens[2].token_type == TokenType.PARAMETER:
            raise errors.not_supported("SAVE TRANSACTION with a variable name")
        return ("save", names[2])
    if first == "SET" and len(words) > 3 and words[1] == "TRANSACTION" and words[2] == "ISOLATION":
        level = " ".join(words[4:])
        if level not in _LEVELS:
            raise errors.server_error(102, f"Incorrect syntax near '{level}'.")
        return ("isolation", _LEVELS[level])
    if first == "SET" and len(words) >= 2:
        option = words[1]
        if option in _NOOP_SET_OPTIONS:
            return ("noop",)
        if option == "IMPLICIT_TRANSACTIONS" and len(words) == 3 and words[2] in ("ON", "OFF"):
            return ("implicit_transactions", words[2] == "ON")
        if option == "LOCK_TIMEOUT" and len(tokens) >= 3:
            text = "".join(t.text for t in tokens[2:])
            try:
                return ("lock_timeout", int(text))
            except ValueError:
                raise errors.not_supported(f"SET LOCK_TIMEOUT {text}") from None
        if tokens[1].token_type != TokenType.PARAMETER:
            raise errors.not_supported(f"SET {option}")
    if first == "ALTER" and len(words) > 1 and words[1] == "DATABASE":
        return _alter_database(words)
    if first == "GO" and len(words) == 1:
        return ("noop",)
    return None


def _alter_database(words: list[str]) -> tuple[object, ...]:
    text = " ".join(words)
    try:
        set_at = words.index("SET")
    except ValueError:
        raise errors.not_supported(text) from None
    option = words[set_at + 1 : set_at + 3]
    if len(option) == 2 and option[0] == "ALLOW_SNAPSHOT_ISOLATION" and option[1] in ("ON", "OFF"):
        return ("allow_snapshot", option[1] == "ON")
    raise errors.not_supported(f"ALTER DATABASE ... SET {' '.join(words[set_at + 1 :])}")
