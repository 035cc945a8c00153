"""Statement dispatch: parse one T-SQL statement, hand it to the planner of its kind.

The modules that plan statements register here by sqlglot node type, with :func:`planner`:
queries (:mod:`.queries`), INSERT / UPDATE / DELETE / TRUNCATE (:mod:`.dml`), CREATE / ALTER /
DROP (:mod:`.ddl`) and EXEC of the CDC procedures (:mod:`.procedures`). :mod:`.session` imports
them all; this module imports none of them. A planner gets the statement's translator (a
:class:`.translate.Translator`), the parsed statement and its text, and returns a :class:`.Plan`.
The translator never passes T-SQL text through: anything no planner understands raises
``NotSupportedError`` naming the construct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from . import errors
from .plan import Plan
from .translator_core import TranslatorCore

Planner = Callable[[Any, Any, str], Plan]
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
    try:
        trees = sqlglot.parse(text, read="tsql")
    except ParseError as exc:
        raise errors.server_error(
            102, f"Incorrect syntax: {exc.errors[0]['description'] if exc.errors else exc}"
        ) from None
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise errors.not_supported("several statements in one batch without ';' between them")
    node = trees[0]
    for kind in type(node).__mro__:
        found = _PLANNERS.get(kind)
        if found is not None:
            return found(translator, node, text)
    if isinstance(node, exp.Command):
        raise errors.not_supported(
            f"the statement {str(node.this).upper()} {str(node.expression or '')[:40]}".strip()
        )
    raise errors.not_supported(f"the {type(node).__name__.upper()} statement")
