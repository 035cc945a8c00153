"""Column rules of a source: which columns are never read, and which are masked as they are read.

In ``cdc_assets.yaml``, per source (``tables`` are ``schema.table`` glob patterns as in
``tables.include``, case-insensitive; ``columns`` name columns of the matching tables)::

    columns:
      hash_key_env: PII_HASH_KEY          # the HMAC key's environment variable (needed by hash)
      rules:
        - {tables: "dbo.customers", columns: [ssn], rule: exclude}   # never selected
        - {tables: "dbo.*", columns: [email], rule: hash}             # HMAC-SHA256, hex
        - {tables: "dbo.customers", columns: [phone], rule: redact}   # '****' / 0
        - {tables: "dbo.customers", columns: [birth_date], rule: null}

What each rule does to the rows is :mod:`cdc_assets.sqlserver.column_masks`'s business. What can
be checked from the file alone is checked when it is loaded (a hash without ``hash_key_env``,
the variable not set, one column given twice in one rule); what needs the table's columns — a
column no matching table has, two rules for one column, a key column excluded — is checked
against the catalog when the definitions are built (:meth:`ColumnRules.check_known`,
:meth:`ColumnRules.apply`), with one line naming the source, the table and the column.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdc_assets.sqlserver.catalog import CaptureInstance, SourceTable
from cdc_assets.sqlserver.column_masks import HashKey, MaskError, mask_instance

__all__ = ["ColumnRule", "ColumnRules", "ColumnRulesError"]

Rule = Literal["exclude", "hash", "redact", "null"]


class ColumnRulesError(ValueError):
    """A rule that does not fit the source's tables; the message says which and what to do."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ColumnRule(_Model):
    """One rule: the columns ``columns`` of the tables matching ``tables`` get ``rule``."""

    tables: tuple[str, ...] = Field(description="schema.table glob patterns, like tables.include")
    columns: tuple[str, ...] = Field(min_length=1, description="Column names (case-insensitive).")
    rule: Rule

    @field_validator("tables", mode="before")
    @classmethod
    def _one_pattern(cls, value: object) -> object:
        return (value,) if isinstance(value, str) else value

    @field_validator("columns")
    @classmethod
    def _no_repeats(cls, columns: tuple[str, ...]) -> tuple[str, ...]:
        lowered = [c.lower() for c in columns]
        repeated = sorted({c for c in columns if lowered.count(c.lower()) > 1})
        if repeated:
            raise ValueError(f"column {repeated[0]!r} is given twice in one rule")
        return columns

    def matches(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}".lower()
        return any(fnmatch.fnmatchcase(name, p.lower()) for p in self.tables)


class ColumnRules(_Model):
    """The source's column rules and the environment variable holding the hash key."""

    hash_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the HMAC-SHA256 key of the hash "
        "rule (one key per source: the same value hashes the same in every table).",
    )
    rules: tuple[ColumnRule, ...] = ()

    @model_validator(mode="after")
    def _key_known(self) -> ColumnRules:
        if any(r.rule == "hash" for r in self.rules):
            if not self.hash_key_env:
                raise ValueError(
                    "a hash rule needs hash_key_env: the name of the environment variable that "
                    "holds the hash key"
                )
            if not os.environ.get(self.hash_key_env):
                raise ValueError(
                    f"the environment variable {self.hash_key_env} (columns.hash_key_env) is not "
                    "set: export the hash key in it before loading the definitions"
                )
        return self

    def hash_key(self) -> HashKey | None:
        """The key read from the environment now (None without hash rules)."""
        if not self.hash_key_env or not any(r.rule == "hash" for r in self.rules):
            return None
        secret = os.environ.get(self.hash_key_env)
        if not secret:
            raise ColumnRulesError(
                f"the environment variable {self.hash_key_env} (columns.hash_key_env) is not set: "
                "export the hash key in it"
            )
        return HashKey(secret.encode("utf-8"))

    def for_table(self, instance: CaptureInstance) -> dict[str, str]:
        """Column name (as the instance spells it) -> rule for ``instance``'s table; a rule's
        column the table lacks is passed over (:meth:`check_known` reports those no table
        has). :class:`ColumnRulesError` for a column given two rules."""
        schema, table = instance.source_schema, instance.source_table
        by_lower = {c.name.lower(): c.name for c in instance.columns}
        found: dict[str, str] = {}
        for rule in self.rules:
            if not rule.matches(schema, table):
                continue
            for wanted in rule.columns:
                name = by_lower.get(wanted.lower())
                if name is None:
                    continue
                if name in found and found[name] != rule.rule:
                    raise ColumnRulesError(
                        f"column {schema}.{table}.{name} has two rules ({found[name]} and "
                        f"{rule.rule}); give each column one rule (a masked column cannot also "
                        "be excluded)"
                    )
                found[name] = rule.rule
        return found

    def check_known(self, instances: Sequence[CaptureInstance]) -> None:
        """:class:`ColumnRulesError` for a rule that matches none of ``instances`` (the
        selected tables), or names a column none of the tables it matches has."""
        for rule in self.rules:
            matched = [i for i in instances if rule.matches(i.source_schema, i.source_table)]
            patterns = ", ".join(rule.tables)
            if not matched:
                raise ColumnRulesError(
                    f"the {rule.rule} rule for tables {patterns} matches no selected table with "
                    "change data capture; fix the pattern (schema.table)"
                )
            names = {c.name.lower() for i in matched for c in i.columns}
            for wanted in rule.columns:
                if wanted.lower() not in names:
                    tables = ", ".join(f"{i.source_schema}.{i.source_table}" for i in matched)
                    raise ColumnRulesError(
                        f"the {rule.rule} rule names column {wanted!r}, which no table it "
                        f"matches ({tables}) captures; fix the column name"
                    )

    def apply(self, instance: CaptureInstance) -> CaptureInstance:
        """``instance`` as it is read with the rules (:func:`~.sqlserver.column_masks.
        mask_instance`); :class:`ColumnRulesError` naming the table for a rule that does not
        fit."""
        if not self.rules:
            return instance
        found = self.for_table(instance)
        if not found:
            return instance
        try:
            return mask_instance(instance, found, self.hash_key())
        except MaskError as exc:
            where = f"table {instance.source_schema}.{instance.source_table}"
            raise ColumnRulesError(f"{where}: {exc}") from None

    def apply_all(
        self, found: Mapping[tuple[str, str], SourceTable]
    ) -> tuple[dict[tuple[str, str], SourceTable], dict[tuple[str, str], str]]:
        """Every instance of every discovered table with the rules applied (a run's catalog),
        and the tables a rule no longer fits (a new capture instance changed a column's type
        or key), each with what is wrong: left out of the catalog, so that table alone fails
        saying so while the others sync."""
        if not self.rules:
            return dict(found), {}
        catalog: dict[tuple[str, str], SourceTable] = {}
        misfits: dict[tuple[str, str], str] = {}
        for name, table in found.items():
            try:
                catalog[name] = replace(
                    table, instances=tuple(self.apply(i) for i in table.instances)
                )
            except ColumnRulesError as exc:
                misfits[name] = (
                    f"columns.rules: {exc}. Fix the rule in the source's config (the table is "
                    "not read until it fits; the other tables sync)"
                )
        return catalog, misfits
