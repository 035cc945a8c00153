"""One statement of a batch: its text with each ``?`` renamed to ``@__p<n>`` (n = its position in
the whole batch) for sqlglot, or the control tuple of a statement sqlglot does not parse, recognised
here from its tokens: transaction control (``BEGIN/COMMIT/ROLLBACK/SAVE TRAN``), ``SET``
options (``TRANSACTION ISOLATION LEVEL``, ``IMPLICIT_TRANSACTIONS``, ``LOCK_TIMEOUT``, the no-op
ones), ``ALTER DATABASE ... SET ALLOW_SNAPSHOT_ISOLATION``. :mod:`.batch` splits a batch into them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokens import Token, TokenType

from .. import errors

PARAM_PREFIX = "__p"

_TRAN_WORDS = {"TRAN", "TRANSACTION", "WORK"}
# words that always start a statement (T-SQL needs no ';' between statements)
ALWAYS_NEW = frozenset(
    [
        *("DECLARE", "IF", "USE", "PRINT", "RETURN", "BEGIN", "COMMIT", "ROLLBACK", "SAVE"),
        *("TRUNCATE", "WHILE", "RAISERROR", "THROW", "BREAK", "CONTINUE", "WAITFOR"),
    ]
)
# words that start the statement an IF runs (its condition ends before the first at depth 0)
STATEMENT_WORDS = frozenset(
    [
        *ALWAYS_NEW,
        *("SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "SET", "EXEC", "EXECUTE"),
        *("CREATE", "DROP", "ALTER", "WITH"),
    ]
)
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
    "CURSOR_CLOSE_ON_COMMIT",  # pymssql sends it; it concerns server cursors, which it has none of
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


def token_word(token: Token) -> str:
    return token.text.upper() if token.token_type != TokenType.IDENTIFIER else ""


_NOT_WORDS = {
    TokenType.IDENTIFIER,
    TokenType.STRING,
    TokenType.NATIONAL_STRING,
    TokenType.NUMBER,
    TokenType.PARAMETER,
    TokenType.PLACEHOLDER,
}


def token_keywords(tokens: list[Token]) -> list[str]:
    """Each token's keyword (upper case), or "" for names, literals, variables and ``x.word``."""
    words = []
    for i, token in enumerate(tokens):
        previous = tokens[i - 1].token_type if i else None
        if token.token_type in _NOT_WORDS or previous in (TokenType.DOT, TokenType.PARAMETER):
            words.append("")
        else:
            words.append(token.text.upper())
    return words


def control_length(tokens: list[Token], i: int) -> int:
    """If a transaction-control statement starts at ``tokens[i]``, return its token count."""
    word = token_word(tokens[i])
    n = len(tokens)

    def next_word(j: int) -> str:
        return token_word(tokens[j]) if j < n else ""

    def optional_name(j: int) -> int:
        """After the name of a transaction or savepoint, if there is one (``BEGIN TRAN IF ...``
        and ``COMMIT TRAN END`` name none: a statement or the block's end follows)."""
        if j < n and tokens[j].token_type == TokenType.IDENTIFIER:
            return j + 1
        if (
            j < n
            and tokens[j].token_type == TokenType.VAR
            and token_word(tokens[j]) not in (*STATEMENT_WORDS, "END", "ELSE")
        ):
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


def renamed_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    control = control_of(tokens)
    start = tokens[0].start
    out: list[str] = []
    pos = start
    count = 0
    previous: Token | None = None
    for token in tokens:
        if token.token_type == TokenType.PLACEHOLDER:
            out.append(sql[pos : token.start])
            marker = f"@{param_name(counter[0])}"
            if previous is not None and token_word(previous) in ("NEXT", "FIRST"):
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


def control_of(tokens: list[Token]) -> tuple[object, ...] | None:
    words = [token_word(t) for t in tokens]
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
