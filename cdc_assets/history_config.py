"""Which tables of a source keep a history (SCD type 2), and which columns make a new version.

A source's ``history:`` settings (``SourceConfig.history``)::

    history:
      include: ["dbo.*"]            # "schema.table" glob patterns (case-insensitive); [] = none
      exclude: ["dbo.audit_*"]
      track_history_columns:        # per table pattern: only changes to these columns make a
        "dbo.customers": [email, tier]   # new version; other changes update the current one

A table with a history gets the asset ``history/<source>/<schema>/<table>_history`` beside its
mirror. The first pattern of ``track_history_columns`` that matches a table decides its columns;
a table no pattern matches versions every change.
"""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, ConfigDict, Field, field_validator


def _matches(patterns: tuple[str, ...], schema: str, table: str) -> bool:
    name = f"{schema}.{table}".lower()
    return any(fnmatch.fnmatchcase(name, p.lower()) for p in patterns)


class HistoryConfig(BaseModel):
    """The tables that keep a history and the columns whose changes make a version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    include: tuple[str, ...] = Field(
        default=(),
        description="Tables that keep a history: 'schema.table' glob patterns; ['*'] for all "
        "the source's tables, [] (the default) for none.",
    )
    exclude: tuple[str, ...] = Field(default=(), description="Patterns left out of include.")
    track_history_columns: dict[str, tuple[str, ...]] = Field(
        default_factory=dict,
        description="Per 'schema.table' pattern, the columns whose changes make a new version; "
        "a change to other columns only updates the current version.",
    )

    @field_validator("track_history_columns")
    @classmethod
    def _columns_given(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for pattern, columns in value.items():
            if not columns:
                raise ValueError(
                    f"track_history_columns[{pattern!r}] lists no column: name the columns "
                    "whose changes make a new version, or leave the pattern out"
                )
        return value

    def enabled(self, schema: str, table: str) -> bool:
        """Whether ``schema.table`` keeps a history."""
        return _matches(self.include, schema, table) and not _matches(self.exclude, schema, table)

    def tracked_columns(self, schema: str, table: str) -> tuple[str, ...] | None:
        """The columns whose changes make a version of ``schema.table`` (None: all)."""
        for pattern, columns in self.track_history_columns.items():
            if _matches((pattern,), schema, table):
                return columns
        return None
