"""T-SQL -> SQLite: the translator, assembled from its sections.

The translator never passes T-SQL text through. For each statement (parsed with sqlglot's tsql
dialect and dispatched by :mod:`.statements`) it resolves every table and column
(:mod:`.queries`, :mod:`.scope`), types every expression and rewrites what SQLite has not
(:mod:`.expressions`, :mod:`.system_functions`, :mod:`.type_rules`), and leaves parameter markers
and raw snippets (:mod:`.translator_core`) that become ``?`` and SQLite text in the plan.

Parameters are renamed markers (see :mod:`.batch_statement`); each occurrence becomes a
:class:`.Slot` that knows which caller parameter it binds and how to encode it.
"""

from __future__ import annotations

from .queries import QueryTranslation
from .system_functions import SystemFunctionTranslation


class Translator(QueryTranslation, SystemFunctionTranslation):
    """Translates one statement (instances are cheap; one per statement)."""
