"""One configured source at definitions load time: its connection, the captured tables the
config selects, and the store its assets write to."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from dagster import AssetKey

from cdc_assets.column_rules import ColumnRulesError
from cdc_assets.config import ConfigError, SourceConfig
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.sqlserver import (
    CaptureInstance,
    ConnectionFactory,
    SourceTable,
    connection_factory,
    discover,
)
from cdc_assets.sqlserver.dbapi import DbapiConnection

from .names import change_log_key, history_key, mirror_key, source_table_key

log = logging.getLogger(__name__)


class CatalogRecorder(Protocol):
    """Keeps the catalog the definitions are built from up to date (see :mod:`..component`)."""

    def record(self, found: dict[tuple[str, str], SourceTable], instance: Any) -> str | None:
        """Record ``found`` if it differs from the recorded catalog; what was done, or None."""
        ...


@dataclass(frozen=True)
class CapturedTable:
    """A captured table as the assets see it: its source, name, capture instance and asset
    keys. The other tables have names of their own: :class:`~cdc_assets.sqlserver.SourceTable`
    (a table as the SQL Server catalog describes it), :class:`~cdc_assets.workload.table_model.
    TableModel` (a table the workload writes), :class:`~cdc_assets.emulator.catalog.catalog.
    EmulatedTable` (a table the emulator stores)."""

    source: str
    schema: str
    name: str
    instance: CaptureInstance  # the current instance when the definitions were loaded

    @property
    def qualified_name(self) -> str:
        return f"[{self.schema}].[{self.name}]"

    @property
    def source_key(self) -> AssetKey:
        return source_table_key(self.source, self.schema, self.name)

    @property
    def change_log_key(self) -> AssetKey:
        return change_log_key(self.source, self.schema, self.name)

    @property
    def mirror_key(self) -> AssetKey:
        return mirror_key(self.source, self.schema, self.name)

    @property
    def history_key(self) -> AssetKey:
        """Its history's key (an asset only where the source's ``history`` names the table)."""
        return history_key(self.source, self.schema, self.name)


@dataclass(frozen=True)
class Source:
    config: SourceConfig
    tables: tuple[CapturedTable, ...]
    storage: str | Path  # a directory or a Hadoop file-system URI
    # records the catalog a sync run reads when it changed (a component's source); None: not kept
    recorder: CatalogRecorder | None = field(default=None, compare=False, repr=False)
    # captured tables the config selects that the capture job has not scanned since CDC was
    # enabled on them (no established capture instance): left out until the next reload
    unscanned: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def factory(self) -> ConnectionFactory:
        return connection_factory(self.config.connection_settings())

    @property
    def store(self) -> AssetStore:
        return AssetStore(self.storage)

    def connect(self) -> DbapiConnection:
        return self.factory.connect(autocommit=True)

    @cached_property
    def history_tables(self) -> tuple[CapturedTable, ...]:
        """The tables that keep a history (the source's ``history`` settings)."""
        return tuple(t for t in self.tables if self.config.history.enabled(t.schema, t.name))

    @cached_property
    def _with_history(self) -> frozenset[CapturedTable]:
        return frozenset(self.history_tables)

    def has_history(self, table: CapturedTable) -> bool:
        """Whether ``table`` keeps a history."""
        return table in self._with_history


def select_tables(
    config: SourceConfig, found: dict[tuple[str, str], SourceTable]
) -> list[CapturedTable]:
    """The captured tables ``config`` includes, each with its current capture instance;
    :class:`ConfigError` if an include pattern names no captured table."""
    unmatched = config.tables.unmatched(list(found))
    if unmatched:
        captured = ", ".join(f"{schema}.{name}" for schema, name in sorted(found)) or "none"
        raise ConfigError(
            f"source {config.name!r}: tables.include {unmatched} match no table with change data "
            f"capture enabled (captured tables: {captured}). Fix the name, or enable CDC on the "
            "table with EXEC sys.sp_cdc_enable_table."
        )
    tables = []
    for (schema, name), table in sorted(found.items()):
        if not config.tables.matches(schema, name):
            continue
        instance = table.current_instance
        if instance is None:
            log.warning(
                "%s: [%s].[%s] has no established capture instance yet (the capture job has not "
                "scanned since CDC was enabled on it); it is left out until the next reload",
                config.name,
                schema,
                name,
            )
            continue
        tables.append(CapturedTable(config.name, schema, name, instance))
    return _with_column_rules(config, tables)


def _with_column_rules(config: SourceConfig, tables: list[CapturedTable]) -> list[CapturedTable]:
    """``tables`` read with the source's column rules; :class:`ConfigError` (one line, nothing
    written) for a rule that does not fit them."""
    rules = config.columns
    if not rules.rules:
        return tables
    problem = ""
    try:
        rules.check_known([t.instance for t in tables])
        return [replace(t, instance=rules.apply(t.instance)) for t in tables]
    except ColumnRulesError as exc:
        problem = str(exc)
    raise ConfigError(f"source {config.name!r}: columns.rules: {problem}")


def source_from_catalog(
    config: SourceConfig,
    found: dict[tuple[str, str], SourceTable],
    storage: str | Path,
    recorder: CatalogRecorder | None = None,
) -> Source:
    """The source with the tables of its catalog ``found`` the config selects
    (:func:`select_tables`; :class:`ConfigError` if they do not fit the config)."""
    unscanned = tuple(
        sorted(
            key
            for key, table in found.items()
            if config.tables.matches(*key) and table.current_instance is None
        )
    )
    tables = tuple(select_tables(config, found))
    return Source(config, tables, storage, recorder=recorder, unscanned=unscanned)


def load_source(config: SourceConfig, storage: Path) -> Source:
    """Discover the source's captured tables (one connection, three catalog queries)."""
    conn = connection_factory(config.connection_settings()).connect(autocommit=True)
    try:
        found = discover(conn)
    finally:
        conn.close()
    return source_from_catalog(config, found, storage)
