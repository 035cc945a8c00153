"""Name resolution while translating: the sources of a FROM clause, nested scopes, CTEs."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import errors
from ..catalog.catalog import EmulatedTable
from ..values.types import SqlType


@dataclass
class Source:
    alias: str
    columns: list[tuple[str, SqlType | None]]
    table: EmulatedTable | None = None
    _index: dict[str, tuple[str, SqlType | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, t in self.columns:
            self._index.setdefault(name.lower(), (name, t))

    def find(self, name: str) -> tuple[str, SqlType | None] | None:
        return self._index.get(name.lower())


class Scope:
    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self.sources: list[Source] = []
        self.ctes: dict[str, list[tuple[str, SqlType | None]]] = dict(parent.ctes) if parent else {}

    def add(self, source: Source) -> None:
        if any(s.alias.lower() == source.alias.lower() for s in self.sources):
            raise errors.server_error(
                1013,
                f'The objects "{source.alias}" in the FROM clause have the same exposed names. '
                "Use correlation names to distinguish them.",
            )
        self.sources.append(source)

    def alias(self, name: str) -> Source | None:
        scope: Scope | None = self
        while scope is not None:
            for source in scope.sources:
                if source.alias.lower() == name.lower():
                    return source
            scope = scope.parent
        return None


@dataclass
class Out:
    """A result column while translating: name, type, and the projection node."""

    name: str
    type: SqlType | None
    python_type: type
