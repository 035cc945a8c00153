"""Statement dispatch: parse one T-SQL statement, hand it to the planner of its kind.

The modules that plan statements register here by sqlglot node type, with :func:`planner`:
queries (:mod:`.queries`), INSERT / UPDATE / DELETE / TRUNCATE (:mod:`.dml`), CREATE / ALTER /
DROP (:mod:`.ddl`) and EXEC of the system procedures (:mod:`.procedures`). :mod:`.session` imports
them all; this module imports none of them. A planner gets the statement's translator (a
:class:`.translate.Translator`), the parsed statement and its text, and returns a :class:`.Plan`.
The translator never passes T-SQL text through: anything no planner understands raises
``NotSupportedError`` naming the construct in the user's terms and quoting the statement as the
user wrote it (:mod:`.source_text`); a statement that does not parse is error 102.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from .. import errors
from ..batches.source_text import user_text
from .plan import Plan
from .translator_core import TranslatorCore

Planner = Callable[[Any, Any, str], Plan]
_FIRST_WORD = re.compile(r"[A-Za-z_]+")
P = TypeVar("P", bound=Planner)

_PLANNERS: dict[type[exp.Expression], Planner] = {}


def planner(*kinds: type[exp.Expression]) -> Callable[[P], P]:
    """Register the decorated function as the planner of statements of the node types ``kinds``."""

    def register(function: P) -> P:
        for kind in kinds:
            if kind in _PLANNERS:
                raise RuntimeError(f"two planners for {kind.__name__} statements")
            _PLANNERS[kind] = function
        return function

    return register


def planners() -> Mapping[type[exp.Expression], Planner]:
    """The registered planners by statement node type (read-only)."""
    return MappingProxyType(_PLANNERS)


def plan(translator: TranslatorCore, text: str) -> Plan:
    """Parse ``text`` (one statement) and plan it with ``translator``."""
    translator.text = text
    statement = user_text(text)
    try:
        trees = sqlglot.parse(text, read="tsql")
    except ParseError as exc:
        near = exc.errors[0].get("highlight") if exc.errors else None
        raise errors.syntax_error(user_text(str(near or "")), statement) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise errors.not_supported("several statements without ';' between them", statement)
    node = trees[0]
    for kind in type(node).__mro__:
        found = _PLANNERS.get(kind)
        if found is not None:
            try:
                return found(translator, node, text)
            except errors.NotSupportedError as exc:
                if exc.where is None:  # quote the statement the construct is in
                    raise errors.not_supported(exc.construct, statement) from None
                raise
    word = _FIRST_WORD.match(statement)
    raise errors.not_supported(word.group(0).upper() if word else "this statement", statement)
