"""The statements of a script's control flow that take values, as the control tuples the session
runs (:mod:`..session.control_flow`): ``PRINT expr``, ``THROW [number, message, state]``,
``RAISERROR (message, severity, state [, argument ...]) [WITH option ...]``, ``WAITFOR DELAY
'hh:mm:ss[.mmm]'``. Their values are computed by a ``SELECT`` of the expressions, so variables,
parameters and functions work in them as anywhere else.
"""

from __future__ import annotations

from sqlglot.tokens import Token, TokenType

from .. import errors
from .batch_statement import Statement, renamed_statement, token_word

_RAISERROR_OPTIONS = ("LOG", "NOWAIT", "SETERROR")


def _select(sql: str, tokens: list[Token], skip: int, counter: list[int]) -> Statement:
    """A SELECT of the expressions in ``tokens`` after the first ``skip`` (the statement's
    keywords: a token's start is not where a string literal's quote is, so the text is cut
    after the last keyword rather than at the first expression's token)."""
    whole = renamed_statement(sql, tokens, counter)
    cut = tokens[skip - 1].end + 1 - tokens[0].start
    return Statement(f"SELECT {whole.text[cut:]}", None, whole.param_count)


def print_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``PRINT expr``: ``("print", SELECT expr)``."""
    if len(tokens) < 2:
        raise errors.server_error(102, "Incorrect syntax near 'PRINT'.")
    value = _select(sql, tokens, 1, counter)
    return Statement(text="", control=("print", value), param_count=value.param_count)


def throw_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``THROW`` (rethrow, in a CATCH block) or ``THROW number, message, state``:
    ``("throw", None | SELECT number, message, state)``."""
    if len(tokens) == 1:
        return Statement(text="", control=("throw", None), param_count=0)
    values = _select(sql, tokens, 1, counter)
    return Statement(text="", control=("throw", values), param_count=values.param_count)


def raiserror_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``RAISERROR (message, severity, state [, argument ...]) [WITH LOG | NOWAIT | SETERROR]``:
    ``("raiserror", SELECT message, severity, state, arguments..., options)``."""
    if len(tokens) < 3 or tokens[1].token_type != TokenType.L_PAREN:
        raise errors.server_error(102, "Incorrect syntax near 'RAISERROR'.")
    depth, close = 0, None
    for i in range(1, len(tokens)):
        depth += tokens[i].token_type == TokenType.L_PAREN
        depth -= tokens[i].token_type == TokenType.R_PAREN
        if depth == 0:
            close = i
            break
    if close is None or close == 2:
        raise errors.server_error(102, "Incorrect syntax near 'RAISERROR'.")
    options = tuple(token_word(t) for t in tokens[close + 1 :] if t.token_type != TokenType.COMMA)
    if options and (options[0] != "WITH" or not set(options[1:]) <= set(_RAISERROR_OPTIONS)):
        raise errors.server_error(102, f"Incorrect syntax near '{tokens[close + 1].text}'.")
    values = _select(sql, tokens[:close], 2, counter)
    return Statement(
        text="", control=("raiserror", values, options[1:]), param_count=values.param_count
    )


def waitfor_statement(sql: str, tokens: list[Token], counter: list[int]) -> Statement:
    """``WAITFOR DELAY 'hh:mm:ss[.mmm]'``: ``("waitfor", SELECT delay)`` (``WAITFOR TIME`` and
    the Service Broker forms are not emulated)."""
    if len(tokens) < 3 or token_word(tokens[1]) != "DELAY":
        raise errors.not_supported("WAITFOR other than WAITFOR DELAY")
    delay = _select(sql, tokens, 2, counter)
    return Statement(text="", control=("waitfor", delay), param_count=delay.param_count)


def raiserror_text(message: str, arguments: list[object]) -> str:
    """RAISERROR's message with its ``%d``/``%i``/``%u``/``%s``/``%x``/``%X``/``%o``
    substitutions (flags, width and precision as printf's; ``%%`` is ``%``)."""
    out: list[str] = []
    i, n = 0, 0
    while i < len(message):
        char = message[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        j = i + 1
        while j < len(message) and message[j] in "-+ 0#*.0123456789":
            j += 1
        if j >= len(message):
            out.append(message[i:])
            break
        kind = message[j]
        if kind == "%":
            out.append("%")
        elif kind in "diusxXo" or (kind in "Ih" and j + 1 < len(message)):
            if kind in "Ih":  # the size prefixes (I64, h) change nothing here
                while j < len(message) and message[j] not in "diusxXo":
                    j += 1
                kind = message[j] if j < len(message) else "s"
            value = arguments[n] if n < len(arguments) else None
            n += 1
            spec = message[i:j].replace("*", "")
            if value is None:
                out.append("(null)")
            elif kind == "s":
                out.append((spec + "s") % (str(value),))
            else:
                out.append((spec + ("d" if kind in "diu" else kind)) % (int(value),))  # type: ignore[call-overload]
        else:
            out.append(message[i : j + 1])
        i = j + 1
    return "".join(out)
