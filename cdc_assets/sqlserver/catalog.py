"""Catalog discovery: which tables are captured, by which capture instances, with which columns.

:func:`discover` reads the whole database's CDC catalog with three queries (capture instances,
captured columns, key columns) — never one query per table — and turns the rows into frozen
descriptions: a :class:`SourceTable` per captured table holding its one or two
:class:`CaptureInstance` objects.

Column types are read from the change table (``cdc.<ci>_CT``), not from the source table: the
change table keeps the captured shape even when the source table is altered or dropped. The
source's current columns (:func:`get_source_columns`) are there to detect schema drift: columns
added since the capture instance was created are not captured until a second instance exists.

A table has at most two capture instances (a schema change needs a new one). The *current*
instance is the newest one that is already valid: its ``start_lsn`` is established (the capture
job has seen it), newest by (``start_lsn``, ``create_date``) as Debezium does. To read a range
across the switch, :meth:`SourceTable.instance_covering` picks the newest instance whose validity
interval contains the range's first LSN.

https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-change-tables-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-captured-columns-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-index-columns-transact-sql
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cdc_assets.lsn import Lsn

from .column_masks import ColumnMask
from .dbapi import DbapiConnection, fetch_all, fetch_value
from .errors import CdcNotEnabled
from .quoting import change_table, quote_table, validate_identifier

__all__ = [
    "CaptureInstance",
    "Column",
    "DatabaseInfo",
    "SourceTable",
    "database_info",
    "discover",
    "get_source_columns",
    "table_exists",
]


@dataclass(frozen=True)
class Column:
    """A column as ``sys.columns`` describes it (``max_length`` in bytes, -1 for ``max``)."""

    name: str
    ordinal: int
    type_name: str
    max_length: int
    precision: int
    scale: int
    nullable: bool
    mask: ColumnMask | None = None  # set by column_masks.mask_instance (a configured rule)


@dataclass(frozen=True)
class CaptureInstance:
    """One capture instance: its change table, captured columns and key (from its index)."""

    name: str
    source_schema: str
    source_table: str
    start_lsn: Lsn | None  # None until the capture job has established the instance
    supports_net_changes: bool
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...]  # empty: no primary key or unique index
    create_date: dt.datetime
    index_name: str | None = None
    excluded_columns: tuple[str, ...] = ()  # never read: a configured rule (column_masks)

    @property
    def change_table(self) -> str:
        """``[cdc].[<name>_CT]``."""
        return change_table(self.name)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def is_valid(self) -> bool:
        """The capture job has established the instance's start (``start_lsn`` is set)."""
        return self.start_lsn is not None

    @property
    def _newness(self) -> tuple[Lsn, dt.datetime]:
        return (self.start_lsn or Lsn.ZERO, self.create_date)


@dataclass(frozen=True)
class SourceTable:
    """A captured source table and its capture instances (oldest first, at most two)."""

    schema: str
    name: str
    instances: tuple[CaptureInstance, ...]

    @property
    def qualified_name(self) -> str:
        """``[schema].[name]``, quoted for T-SQL text (also the ``OBJECT_ID`` argument)."""
        return quote_table(self.schema, self.name)

    @property
    def current_instance(self) -> CaptureInstance | None:
        """The newest valid instance (by start LSN, then create date); None if none is valid."""
        valid = [i for i in self.instances if i.is_valid]
        return max(valid, key=lambda i: i._newness) if valid else None

    def instance_covering(self, lsn: Lsn) -> CaptureInstance | None:
        """The newest valid instance whose start LSN is at or below ``lsn``.

        For a range ``(lo, hi]`` pass ``lo.increment()``: that instance holds every change of the
        range (unless cleanup moved its minimum since; :mod:`.changes` re-checks that).
        """
        valid = [i for i in self.instances if i.start_lsn is not None and i.start_lsn <= lsn]
        return max(valid, key=lambda i: i._newness) if valid else None

    def instance(self, name: str) -> CaptureInstance | None:
        return next((i for i in self.instances if i.name == name), None)


@dataclass(frozen=True)
class DatabaseInfo:
    name: str
    cdc_enabled: bool
    snapshot_isolation: bool  # ALLOW_SNAPSHOT_ISOLATION is ON


# https://learn.microsoft.com/en-us/sql/relational-databases/system-catalog-views/sys-databases-transact-sql
DATABASE_QUERY = (
    "SELECT name, is_cdc_enabled, snapshot_isolation_state_desc FROM sys.databases "
    "WHERE database_id = DB_ID()"
)


def database_info(conn: DbapiConnection) -> DatabaseInfo:
    """The current database's name, whether CDC is enabled and snapshot isolation allowed."""
    ((name, enabled, snapshot_state),) = fetch_all(conn, DATABASE_QUERY)
    return DatabaseInfo(name, bool(enabled), snapshot_state == "ON")


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-change-tables-transact-sql
CAPTURE_INSTANCES_QUERY = """
SELECT ct.capture_instance, s.name AS source_schema, t.name AS source_table, ct.object_id,
       ct.source_object_id, ct.start_lsn, ct.supports_net_changes, ct.create_date, ct.index_name
FROM cdc.change_tables AS ct
JOIN sys.tables AS t ON t.object_id = ct.source_object_id
JOIN sys.schemas AS s ON s.schema_id = t.schema_id
ORDER BY s.name, t.name, ct.create_date
"""

# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-captured-columns-transact-sql
CAPTURED_COLUMNS_QUERY = """
SELECT ct.capture_instance, cc.column_name, cc.column_ordinal, ty.name AS type_name,
       c.max_length, c.precision, c.scale, c.is_nullable
FROM cdc.captured_columns AS cc
JOIN cdc.change_tables AS ct ON ct.object_id = cc.object_id
JOIN sys.columns AS c ON c.object_id = ct.object_id AND c.name = cc.column_name
JOIN sys.types AS ty ON ty.user_type_id = c.user_type_id
ORDER BY ct.capture_instance, cc.column_ordinal
"""

# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-index-columns-transact-sql
KEY_COLUMNS_QUERY = """
SELECT ct.capture_instance, ic.column_name, ic.index_ordinal
FROM cdc.index_columns AS ic JOIN cdc.change_tables AS ct ON ct.object_id = ic.object_id
ORDER BY ct.capture_instance, ic.index_ordinal
"""


def _column(row: Sequence[Any]) -> Column:
    """A column from ``(name, ordinal, type_name, max_length, precision, scale, is_nullable)``."""
    name, ordinal, type_name, max_length, precision, scale, nullable = row
    return Column(
        name=validate_identifier(name),
        ordinal=int(ordinal),
        type_name=str(type_name),
        max_length=int(max_length),
        precision=int(precision),
        scale=int(scale),
        nullable=bool(nullable),
    )


def discover(conn: DbapiConnection) -> dict[tuple[str, str], SourceTable]:
    """Every captured table of the database, keyed by ``(schema, table)``; three queries in all.

    Raises :class:`~.errors.CdcNotEnabled` when the database has no CDC.
    """
    try:
        instance_rows = fetch_all(conn, CAPTURE_INSTANCES_QUERY)
    except CdcNotEnabled:
        raise CdcNotEnabled(database_info(conn).name, native_error=208) from None
    column_rows = fetch_all(conn, CAPTURED_COLUMNS_QUERY)
    key_rows = fetch_all(conn, KEY_COLUMNS_QUERY)

    columns: dict[str, list[Column]] = defaultdict(list)
    for row in column_rows:
        columns[row[0]].append(_column(row[1:]))
    keys: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for instance, column_name, ordinal in key_rows:
        keys[instance].append((int(ordinal), validate_identifier(column_name)))

    instances: dict[tuple[str, str], list[CaptureInstance]] = defaultdict(list)
    for row in instance_rows:
        name, schema, table, _oid, _source_oid, start_lsn, net, created, index_name = row
        instances[(schema, table)].append(
            CaptureInstance(
                name=validate_identifier(name),
                source_schema=validate_identifier(schema),
                source_table=validate_identifier(table),
                start_lsn=Lsn.from_bytes(start_lsn) if start_lsn is not None else None,
                supports_net_changes=bool(net),
                columns=tuple(sorted(columns.get(name, ()), key=lambda c: c.ordinal)),
                key_columns=tuple(c for _, c in sorted(keys.get(name, ()))),
                create_date=created,
                index_name=index_name,
            )
        )
    return {
        key: SourceTable(key[0], key[1], tuple(found)) for key, found in sorted(instances.items())
    }


# https://learn.microsoft.com/en-us/sql/relational-databases/system-catalog-views/sys-columns-transact-sql
SOURCE_COLUMNS_QUERY = """
SELECT c.name, c.column_id, ty.name AS type_name, c.max_length, c.precision, c.scale, c.is_nullable
FROM sys.columns AS c JOIN sys.types AS ty ON ty.user_type_id = c.user_type_id
WHERE c.object_id = OBJECT_ID(?) ORDER BY c.column_id
"""


def get_source_columns(conn: DbapiConnection, schema: str, table: str) -> tuple[Column, ...]:
    """The source table's current columns (empty when the table does not exist)."""
    rows = fetch_all(conn, SOURCE_COLUMNS_QUERY, quote_table(schema, table))
    return tuple(_column(row) for row in rows)


# https://learn.microsoft.com/en-us/sql/t-sql/functions/object-id-transact-sql
OBJECT_ID_QUERY = "SELECT OBJECT_ID(?)"


def table_exists(conn: DbapiConnection, schema: str, table: str) -> bool:
    return fetch_value(conn, OBJECT_ID_QUERY, quote_table(schema, table)) is not None
