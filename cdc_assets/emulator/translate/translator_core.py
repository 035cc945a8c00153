"""The state one translation carries and the markers it leaves in the SQLite text.

:class:`TranslatorCore` is the base of the translator's sections (:mod:`.queries`,
:mod:`.expressions`, :mod:`.system_functions`, assembled in :mod:`.translate`): the catalog and
database it resolves names in, the parameter slots and raw SQLite snippets it collects, whether
the statement takes the table lock, and the methods by which the sections call each other
(``expr``, ``query``, ``system_function``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from ..batches.batch_statement import PARAM_PREFIX
from ..batches.source_text import node_text, quoted
from ..batches.variables import NO_VARIABLES, VariableView
from ..catalog.catalog import Catalog
from ..values.types import SqlType
from .plan import Slot
from .scope import Out, Scope
from .type_rules import Want

_RAW_RE = re.compile(r'"__emu_raw_(\d+)"')
_SLOT_RE = re.compile(r":__emq_(\d+)")


def ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


class TranslatorCore:
    """Translates one statement (instances are cheap; one per statement)."""

    def __init__(self, catalog: Catalog, db_name: str) -> None:
        self.catalog = catalog
        self.db_name = db_name
        self.slots: list[Slot] = []
        self.raw: list[str] = []
        self.lock = False
        self.variables: VariableView = NO_VARIABLES  # the batch's variables (set by the session)
        self.text = ""  # the statement being translated (set by .statements.plan)

    def quote(self, node: exp.Expression) -> str:
        """The user's text of ``node`` in single quotes, for error messages."""
        return quoted(node, self.text)

    def call_name(self, node: exp.Expression) -> str:
        """The function name of a call as the user wrote it (``OPENJSON`` of ``OPENJSON(x)``)."""
        return node_text(node, self.text).split("(", 1)[0].strip()

    # -- the sections' entry points (defined in .expressions, .queries, .system_functions) ------
    def expr(
        self, node: exp.Expression, scope: Scope, want: Want | None = None
    ) -> tuple[exp.Expression, SqlType | None]:
        """Translate an expression; return the new node and its SQL Server type (or None)."""
        raise NotImplementedError

    def query(self, node: exp.Expression, parent: Scope | None, top: bool = False) -> list[Out]:
        """Translate a SELECT / set operation in place; return its result columns."""
        raise NotImplementedError

    def system_function(
        self, node: exp.Expression, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        """Translate a call of a SQL Server system function (``GETDATE()``, ``sys.fn_cdc_*``)."""
        raise NotImplementedError

    # -- markers --------------------------------------------------------------------------------
    def param(self, index: int, encoder: Callable[[Any], Any] | None) -> exp.Expression:
        self.slots.append(Slot(index, encoder))
        return exp.Placeholder(this=f"__emq_{len(self.slots) - 1}")

    def variable(self, name: str) -> tuple[exp.Expression, SqlType]:
        """``@name``: the batch variable, bound as a parameter of its declared type."""
        index, sql_type = self.variables.scalar(name)
        return self.param(index, sql_type.encoder), sql_type

    def raw_node(self, snippet: str) -> exp.Expression:
        self.raw.append(snippet)
        return exp.Column(this=ident(f"__emu_raw_{len(self.raw) - 1}"))

    def sql(self, node: exp.Expression) -> str:
        """SQLite text of a translated node (markers still in place)."""
        return node.sql(dialect="sqlite", identify=True)

    def finish(self, text: str) -> tuple[str, tuple[Slot, ...]]:
        """Expand raw snippets and turn parameter markers into ``?`` in order."""
        for _ in range(50):
            if '"__emu_raw_' not in text:
                break
            text = _RAW_RE.sub(lambda m: f"({self.raw[int(m.group(1))]})", text)
        order: list[Slot] = []

        def repl(match: re.Match[str]) -> str:
            order.append(self.slots[int(match.group(1))])
            return "?"

        text = _SLOT_RE.sub(repl, text)
        return text, tuple(order)

    @staticmethod
    def param_index(node: exp.Expression) -> int | None:
        """The caller's parameter index if ``node`` is a renamed ``?`` marker."""
        if isinstance(node, exp.Parameter):
            inner = node.this
            name = inner.name if isinstance(inner, exp.Expression) else str(inner)
            if name.startswith(PARAM_PREFIX) and name[len(PARAM_PREFIX) :].isdigit():
                return int(name[len(PARAM_PREFIX) :])
        if isinstance(node, exp.Paren):
            return TranslatorCore.param_index(node.this)
        return None
