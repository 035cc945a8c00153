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

Here: the splitting and nesting; a statement's parameters and control tuple are made in
:mod:`.batch_statement`, the statements of variables in :mod:`.variable_statements`.
"""

from __future__ import annotations

from functools import lru_cache

from sqlglot.dialects.tsql import TSQL
from sqlglot.tokens import Token, TokenType

from .. import errors
from .batch_statement import (
    ALWAYS_NEW,
    STATEMENT_WORDS,
    Statement,
    control_length,
    renamed_statement,
    token_keywords,
)
from .control_statements import (
    print_statement,
    raiserror_statement,
    throw_statement,
    waitfor_statement,
)
from .security_statements import security_statement
from .variable_statements import (
    assigns_variables,
    declare_statements,
    insert_variable_statement,
    select_assignment,
    set_variable_statement,
)


class _Tokenizer(TSQL.Tokenizer):  # type: ignore[name-defined,misc]
    """sqlglot's T-SQL tokens, except that ``END`` (after a ``;``) and ``PRINT`` (at the start)
    stay words: sqlglot takes them as commands and makes the rest of the text one string
    (``...; END TRY``, ``PRINT 'x' SELECT 1``)."""

    COMMANDS = TSQL.Tokenizer.COMMANDS - {TokenType.END, TokenType.COMMAND}


_DIALECT = TSQL()


@lru_cache(maxsize=2048)
def split(sql: str) -> tuple[Statement, ...]:
    """Split ``sql`` into statements (cached: the same texts are sent again and again)."""
    try:
        tokens = _Tokenizer(dialect=_DIALECT).tokenize(sql)
    except Exception as exc:  # the tokenizer's error type varies across sqlglot versions
        raise errors.server_error(102, f"Incorrect syntax: {exc}") from None
    return tuple(_Parser(sql, tokens).batch())


_SELECT_CONTINUES = ("UNION", "ALL", "EXCEPT", "INTERSECT", "AS", "FOR")
_GRANTS = ("GRANT", "DENY", "REVOKE")
_DML = ("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE")
_BLOCK_NOT = ("TRAN", "TRANSACTION", "DISTRIBUTED", "TRY", "CATCH", "DIALOG", "CONVERSATION")


class _Parser:
    """Statements of a batch, with IF ... ELSE and BEGIN ... END blocks nested."""

    def __init__(self, sql: str, tokens: list[Token]) -> None:
        self.sql = sql
        self.tokens = tokens
        self.words = token_keywords(tokens)
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
        if word == "BEGIN" and following == "TRY":
            return [self._try()]
        if word == "WHILE":
            return [self._while()]
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
        length = control_length(self.tokens, self.i)
        end = self.i + length if length else self._simple_end(self.i)
        part = self.tokens[self.i : end]
        self.i = end
        return _simple(self.sql, part, self.counter)

    def _condition(self) -> Statement:
        """The condition of the IF or WHILE at ``self.i``, as a SELECT of 1 or 0; ``self.i``
        moves to the statement it governs."""
        start = self.i + 1
        depth, j = 0, start
        while j < len(self.tokens):
            kind = self.tokens[j].token_type
            depth += kind == TokenType.L_PAREN
            depth -= kind == TokenType.R_PAREN
            if depth == 0 and j > start and self.words[j] in STATEMENT_WORDS:
                break
            j += 1
        if j >= len(self.tokens):
            raise errors.server_error(102, "Incorrect syntax near the end of the IF statement.")
        condition = renamed_statement(self.sql, self.tokens[start:j], self.counter)
        self.i = j
        return Statement(
            text=f"SELECT CASE WHEN {condition.text} THEN 1 ELSE 0 END",
            control=None,
            param_count=condition.param_count,
        )

    def _if(self) -> Statement:
        """``IF condition statement [ELSE statement]``: ``("if", test, then, else)``, the test a
        SELECT of 1 or 0; each branch one statement or a BEGIN ... END block."""
        test = self._condition()
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

    def _while(self) -> Statement:
        """``WHILE condition statement``: ``("while", test, body)``; BREAK and CONTINUE in the
        body end the loop or its round."""
        test = self._condition()
        body = _block(self._one())
        count = test.param_count + body.param_count
        return Statement(text=self.sql, control=("while", test, body), param_count=count)

    def _expect(self, *words: str) -> None:
        for word in words:
            if self.i >= len(self.tokens) or self.words[self.i] != word:
                near = self.tokens[self.i].text if self.i < len(self.tokens) else "the end"
                raise errors.server_error(102, f"Incorrect syntax near '{near}'.")
            self.i += 1

    def _try(self) -> Statement:
        """``BEGIN TRY ... END TRY BEGIN CATCH ... END CATCH``: ``("try", body, handler)``."""
        self.i += 2
        body = self._until(())
        self._expect("END", "TRY")
        self._skip_semicolons()
        self._expect("BEGIN", "CATCH")
        handler = self._until(())
        self._expect("END", "CATCH")
        if not body:
            raise errors.server_error(102, "Incorrect syntax near 'END TRY'.")
        empty = Statement(text="", control=("block", ()), param_count=0)
        count = sum(s.param_count for s in (*body, *handler))
        return Statement(
            text=self.sql,
            control=("try", _block(body), _block(handler) if handler else empty),
            param_count=count,
        )

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
                elif word in ALWAYS_NEW and not (word == "IF" and first in ("DROP", "ALTER")):
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


_VALUE_STATEMENTS = {
    "PRINT": print_statement,
    "THROW": throw_statement,
    "RAISERROR": raiserror_statement,
    "WAITFOR": waitfor_statement,
}


def _block(statements: list[Statement]) -> Statement:
    if len(statements) == 1:
        return statements[0]
    count = sum(s.param_count for s in statements)
    return Statement(text="", control=("block", tuple(statements)), param_count=count)


def _simple(sql: str, tokens: list[Token], counter: list[int]) -> list[Statement]:
    """One statement without IF or blocks; the batch-level ones are recognised here:
    ``DECLARE``, ``SET @v = ...``, ``SELECT @v = ...``, ``INSERT INTO @t ...`` and ``USE``."""
    words = token_keywords(tokens)
    first = words[0]
    if first == "DECLARE":
        return declare_statements(sql, tokens, counter)
    if (
        first == "SET"
        and len(tokens) > 2
        and tokens[1].token_type == TokenType.PARAMETER
        and tokens[2].token_type != TokenType.PARAMETER  # not SET @@OPTION
    ):
        return [set_variable_statement(sql, tokens, counter)]
    if first == "INSERT":
        at = 2 if len(words) > 1 and words[1] == "INTO" else 1
        if at < len(tokens) and tokens[at].token_type == TokenType.PARAMETER:
            return [insert_variable_statement(sql, tokens, at, counter)]
    if first in ("BREAK", "CONTINUE", "RETURN") and len(tokens) == 1:
        return [Statement(text="", control=(first.lower(),), param_count=0)]
    if first in _VALUE_STATEMENTS:
        return [_VALUE_STATEMENTS[first](sql, tokens, counter)]
    security = security_statement(tokens)
    if security is not None:
        return [security]
    if first == "USE" and len(tokens) == 2:
        return [Statement(text="", control=("use", tokens[1].text), param_count=0)]
    statement = renamed_statement(sql, tokens, counter)
    if first == "SELECT" and assigns_variables(tokens):
        return [select_assignment(statement)]
    return [statement]
