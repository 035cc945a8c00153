"""Split a T-SQL batch into statements and recognise what sqlglot cannot parse.

A batch may hold several statements separated by ``;`` — or, for transaction control, by line
breaks only (``BEGIN TRAN`` / ``SELECT 1`` / ``COMMIT``). Each ``?`` parameter is renamed to a
T-SQL variable ``@__p<n>`` (n = its position in the whole batch), because sqlglot parses
variables in places where it rejects ``?`` (``FETCH NEXT ? ROWS``) and because the renamed marker
survives rewriting, so parameters can be re-ordered for the SQLite text.

sqlglot's tsql dialect does not parse ``SAVE TRANSACTION``, ``SET TRANSACTION ISOLATION LEVEL`` or
``ALTER DATABASE``; those, and all transaction control, are recognised here from the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

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
    ``("implicit_transactions", on)``. Otherwise ``text`` is
    the statement with parameters renamed, ready for sqlglot.
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
    pieces: list[list[Token]] = [[]]
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            pieces.append([])
        else:
            pieces[-1].append(token)
    statements: list[Statement] = []
    counter = [0]
    for piece in pieces:
        if piece and _word(piece[0]) == "IF":
            statements.append(_conditional(sql, piece, counter))
            continue
        for part in _split_control(piece):
            if part:
                statements.append(_statement(sql, part, counter))
    return tuple(statements)


def _word(token: Token) -> str:
    return token.text.upper() if token.token_type != TokenType.IDENTIFIER else ""


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


def _split_control(tokens: list[Token]) -> list[list[Token]]:
    """Cut transaction-control statements out of a piece written without semicolons."""
    parts: list[list[Token]] = [[]]
    depth = 0
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        length = _control_length(tokens, i) if depth == 0 else 0
        if length:
            parts.append(tokens[i : i + length])
            parts.append([])
            i += length
            continue
        parts[-1].append(token)
        i += 1
    return [p for p in parts if p]


# words that start the statement an IF runs (its condition ends before the first at depth 0)
_STATEMENT_WORDS = frozenset(
    [
        *("BEGIN", "COMMIT", "ROLLBACK", "SAVE", "SELECT", "INSERT", "UPDATE", "DELETE", "SET"),
        *("EXEC", "EXECUTE", "PRINT", "RETURN", "DECLARE", "TRUNCATE", "CREATE", "DROP", "ALTER"),
    ]
)


def _depth_zero_words(tokens: list[Token], start: int) -> list[tuple[int, str]]:
    found, depth = [], 0
    for i in range(start, len(tokens)):
        kind = tokens[i].token_type
        depth += kind == TokenType.L_PAREN
        depth -= kind == TokenType.R_PAREN
        if depth == 0:
            found.append((i, _word(tokens[i])))
    return found


def _conditional(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``IF condition statement [ELSE statement]``, each branch one statement (no BEGIN ... END
    block): ``("if", condition as a SELECT of 1 or 0, then, else)``."""
    words = _depth_zero_words(tokens, 1)
    body = next((i for i, w in words if w in _STATEMENT_WORDS and i > 1), None)
    if body is None:
        raise errors.server_error(102, "Incorrect syntax near the end of the IF statement.")
    otherwise = next((i for i, w in words if w == "ELSE" and i > body), None)
    end = len(tokens) if otherwise is None else otherwise
    if _word(tokens[body]) == "BEGIN" and _word(tokens[body + 1]) not in _TRAN_WORDS:
        raise errors.not_supported("IF with a BEGIN ... END block")
    condition = _statement(sql, tokens[1:body], counter)
    test = Statement(
        text=f"SELECT CASE WHEN {condition.text} THEN 1 ELSE 0 END",
        control=None,
        param_count=condition.param_count,
    )
    branches = []
    for part in (tokens[body:end], tokens[end + 1 :] if otherwise is not None else []):
        pieces = _split_control(part) if part else []
        if len(pieces) > 1:
            raise errors.not_supported("IF with more than one statement in a branch")
        branches.append(_statement(sql, pieces[0], counter) if pieces else None)
    count = test.param_count + sum(b.param_count for b in branches if b is not None)
    return Statement(text=sql, control=("if", test, branches[0], branches[1]), param_count=count)


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
