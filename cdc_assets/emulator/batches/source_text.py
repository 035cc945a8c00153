"""The user's own T-SQL for error messages: a statement's text, or the slice a parsed node spans.

Error messages quote what the user wrote, never sqlglot's node classes or its regenerated SQL
(``SUSER_SNAME()`` is parsed as ``CurrentUser`` and printed back as ``CURRENT_USER()``). The
parser records where the tokens of names, literals and function names start and end; a node's
slice runs from the first to the last such token under it, widened to whole parentheses and to
the call a function node is (``CAST(``...``)``). The ``@__p<n>`` markers the batch splitter put in
place of ``?`` are shown as ``?`` again. Texts are cut at :data:`LIMIT` characters.
"""

from __future__ import annotations

import re
from functools import lru_cache

from sqlglot import exp
from sqlglot.dialects.tsql import TSQL
from sqlglot.tokens import Token, TokenType

from .batch_statement import PARAM_PREFIX

LIMIT = 80

_WRAPPED_PARAM = re.compile(rf"(?i)\b(NEXT|FIRST)(\s+)\(@{PARAM_PREFIX}\d+\)")
_PARAM = re.compile(rf"@{PARAM_PREFIX}\d+")
_BLANKS = re.compile(r"\s+")
_FIRST_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def user_text(text: str, limit: int = LIMIT) -> str:
    """``text`` as the user wrote it: ``?`` markers back, blanks folded, cut at ``limit``."""
    text = _WRAPPED_PARAM.sub(r"\1\2?", text)
    text = _BLANKS.sub(" ", _PARAM.sub("?", text)).strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def node_text(node: exp.Expression, text: str, limit: int = LIMIT) -> str:
    """The part of ``text`` (the statement ``node`` was parsed from) that ``node`` spans."""
    span = _span(node, text)
    if span is None:  # no position under the node: its SQL as sqlglot writes it
        return user_text(node.sql("tsql"), limit)
    return user_text(text[span[0] : span[1]], limit)


def quoted(node: exp.Expression, text: str) -> str:
    """:func:`node_text` in single quotes, as SQL Server quotes names in its messages."""
    return f"'{node_text(node, text)}'"


@lru_cache(maxsize=64)
def _tokens(text: str) -> tuple[Token, ...]:
    try:
        return tuple(TSQL().tokenize(text))
    except Exception:  # the tokenizer's error type varies across sqlglot versions
        return ()


def _positions(node: exp.Expression) -> tuple[int, int] | None:
    starts: list[int] = []
    ends: list[int] = []
    for inner in node.walk():
        meta = inner._meta
        if meta and isinstance(meta.get("start"), int) and isinstance(meta.get("end"), int):
            starts.append(meta["start"])
            ends.append(meta["end"])
    return (min(starts), max(ends)) if starts else None


def _matching(tokens: tuple[Token, ...], k: int, step: int) -> int:
    """The index of the parenthesis matching the one at ``k`` (searching in direction ``step``)."""
    depth = 0
    while 0 <= k < len(tokens):
        kind = tokens[k].token_type
        depth += (kind == TokenType.L_PAREN) - (kind == TokenType.R_PAREN)
        if depth == 0:
            return k
        k += step
    return k - step


def _span(node: exp.Expression, text: str) -> tuple[int, int] | None:
    found = _positions(node)
    tokens = _tokens(text)
    if found is None or not tokens:
        return None
    lo, hi = found
    inside = [k for k, t in enumerate(tokens) if t.start >= lo and t.end <= hi]
    if not inside:
        return lo, hi + 1
    i, j = inside[0], inside[-1]
    i, j = _align(node, tokens, i, j)
    # whole parentheses: an unmatched ')' pulls the start left, an unmatched '(' the end right
    depth = unopened = 0
    for k in range(i, j + 1):
        kind = tokens[k].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            if depth:
                depth -= 1
            else:
                unopened += 1
    while unopened and i > 0:
        i -= 1
        kind = tokens[i].token_type
        unopened += (kind == TokenType.R_PAREN) - (kind == TokenType.L_PAREN)
    if depth:
        j = _matching(tokens, _last_open(tokens, i, j), 1)
    if isinstance(node, exp.Func):
        # a call: the name's token followed by "(...)", or arguments inside "NAME(" ... ")"
        if j + 1 < len(tokens) and tokens[j + 1].token_type == TokenType.L_PAREN and i == j:
            j = _matching(tokens, j + 1, 1)
        elif i >= 2 and tokens[i - 1].token_type == TokenType.L_PAREN:
            word = _FIRST_WORD.match(node.sql("tsql"))
            if word and tokens[i - 2].text.upper() == word.group(0).upper():
                j = max(j, _matching(tokens, i - 1, 1))
                i -= 2
    return tokens[i].start, tokens[j].end + 1


def _last_open(tokens: tuple[Token, ...], i: int, j: int) -> int:
    """The first '(' between ``i`` and ``j`` that is not closed before ``j``."""
    stack: list[int] = []
    for k in range(i, j + 1):
        kind = tokens[k].token_type
        if kind == TokenType.L_PAREN:
            stack.append(k)
        elif kind == TokenType.R_PAREN and stack:
            stack.pop()
    return stack[0] if stack else j


def _align(node: exp.Expression, tokens: tuple[Token, ...], i: int, j: int) -> tuple[int, int]:
    """Widen ``tokens[i..j]`` by the keywords and punctuation sqlglot writes around the node's
    positioned tokens (``NEXT VALUE FOR s``, ``a COLLATE x``, ``x IN (?, ?)``), where the
    statement has the same tokens there."""
    generated = [t.text.upper() for t in _tokens(node.sql("tsql"))]
    first, last = tokens[i].text.upper(), tokens[j].text.upper()
    if first in generated:
        before = generated[: generated.index(first)]
        if before and [t.text.upper() for t in tokens[max(0, i - len(before)) : i]] == before:
            i -= len(before)
    if last in generated:
        after = generated[len(generated) - generated[::-1].index(last) :]
        if after and [t.text.upper() for t in tokens[j + 1 : j + 1 + len(after)]] == after:
            j += len(after)
    return i, j
