"""The catalog: tables, columns, keys and capture instances, read from the bookkeeping tables.

A :class:`Catalog` is an immutable snapshot taken at one ``catalog_token``; connections reload it
when the token changes (any DDL or CDC administration replaces the token), and translations are
cached per token. Name resolution follows SQL Server: names are case-insensitive, a missing
schema means ``dbo``, a three-part name may name the current database (or ``msdb`` for
``msdb.dbo.cdc_jobs``), and an unknown object is error 208.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field

from . import errors
from .storage import SYSTEM_BY_NAME, SystemObject
from .types import SqlType, parse_type_text


@dataclass(frozen=True)
class Column:
    """One column: SQL Server name, type, nullability (column_id as in ``sys.columns``)."""

    column_id: int
    name: str
    type: SqlType
    nullable: bool = True
    identity: bool = False


@dataclass(frozen=True)
class Table:
    """A table or view reachable from T-SQL, with its SQLite name and typed columns."""

    schema: str
    name: str
    physical: str
    columns: tuple[Column, ...]
    kind: str  # "user" (source table), "change" (cdc.<ci>_CT), "system" (tables and views)
    object_id: int | None = None
    key: tuple[str, ...] = ()
    pk_name: str | None = None
    tracked: bool = False
    _by_name: dict[str, Column] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({c.name.lower(): c for c in self.columns})

    def column(self, name: str) -> Column | None:
        return self._by_name.get(name.lower())

    @property
    def display(self) -> str:
        return f"{self.schema}.{self.name}"


@dataclass(frozen=True)
class CaptureInstance:
    """A capture instance: its change table, captured columns (in ordinal order) and key."""

    name: str
    object_id: int
    source_object_id: int
    change_table: str  # SQLite name of cdc.<ci>_CT
    create_lsn: int
    captured: tuple[str, ...]  # captured column names, ordinal order
    column_ids: tuple[int, ...]  # source column ids of the captured columns
    key_columns: tuple[str, ...]
    supports_net_changes: bool
    index_name: str | None


@dataclass(frozen=True)
class Catalog:
    token: int
    db_guid: str
    cdc_enabled: bool
    allow_snapshot: bool
    tables: dict[tuple[str, str], Table]
    tables_by_id: dict[int, Table]
    schemas: dict[str, int]
    instances: dict[str, CaptureInstance]

    def instances_of(self, source_object_id: int) -> list[CaptureInstance]:
        found = [i for i in self.instances.values() if i.source_object_id == source_object_id]
        return sorted(found, key=lambda i: i.create_lsn)

    def resolve(
        self, name: str, schema: str | None = None, database: str | None = None, db_name: str = ""
    ) -> Table:
        """Find a table/view by its (database, schema, name) parts; error 208 if absent."""
        display = ".".join(p for p in (database, schema, name) if p)
        catalog: str | None = None
        if database:
            if database.lower() == "msdb":
                catalog = "msdb"
            elif database.lower() not in (db_name.lower(), "tempdb"):
                raise errors.invalid_object(display)
        schema_l = (schema or "dbo").lower()
        system = SYSTEM_BY_NAME.get((catalog, schema_l, name.lower()))
        if system is not None:
            if system.requires_cdc and not self.cdc_enabled:
                raise errors.invalid_object(display)
            return system_table(system)
        if catalog is not None:
            raise errors.invalid_object(display)
        table = self.tables.get((schema_l, name.lower()))
        if table is None:
            raise errors.invalid_object(display)
        return table

    def find(self, name: str, schema: str | None = None) -> Table | None:
        return self.tables.get(((schema or "dbo").lower(), name.lower()))


_SYSTEM_TABLES: dict[str, Table] = {}


def system_table(obj: SystemObject) -> Table:
    table = _SYSTEM_TABLES.get(obj.physical)
    if table is None:
        columns = tuple(Column(i + 1, name, t, True) for i, (name, t) in enumerate(obj.columns))
        table = Table(obj.schema, obj.name, obj.physical, columns, "system")
        _SYSTEM_TABLES[obj.physical] = table
    return table


def read_token(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT catalog_token FROM _emu_state").fetchone()[0])


def load(db: sqlite3.Connection) -> Catalog:
    """Read the catalog (call inside the caller's current read snapshot)."""
    token = read_token(db)
    meta = dict(db.execute("SELECT key, value FROM _emu_meta").fetchall())
    schemas = {
        name.lower(): sid for sid, name in db.execute("SELECT schema_id, name FROM _emu_schemas")
    }
    schema_names = {
        sid: name for sid, name in db.execute("SELECT schema_id, name FROM _emu_schemas")
    }
    columns: dict[int, list[Column]] = {}
    for oid, cid, name, type_sql, nullable, identity in db.execute(
        "SELECT object_id, column_id, name, type_sql, is_nullable, is_identity FROM _emu_columns "
        "ORDER BY object_id, column_id"
    ):
        sql_type, _ = parse_type_text(type_sql)
        columns.setdefault(oid, []).append(
            Column(cid, name, sql_type, bool(nullable), bool(identity))
        )
    keys: dict[int, list[int]] = {}
    for oid, cid in db.execute(
        "SELECT object_id, column_id FROM _emu_key_columns ORDER BY object_id, key_ordinal"
    ):
        keys.setdefault(oid, []).append(cid)
    tables: dict[tuple[str, str], Table] = {}
    by_id: dict[int, Table] = {}
    for oid, sid, name, _kind, physical, pk_name, tracked, shipped in db.execute(
        "SELECT object_id, schema_id, name, type, physical, pk_name, is_tracked_by_cdc, "
        "is_ms_shipped FROM _emu_objects"
    ):
        cols = tuple(columns.get(oid, ()))
        by_cid = {c.column_id: c.name for c in cols}
        key = tuple(by_cid[c] for c in keys.get(oid, []) if c in by_cid)
        schema = schema_names.get(sid, "dbo")
        table = Table(
            schema,
            name,
            physical,
            cols,
            "change" if shipped else "user",
            object_id=oid,
            key=key,
            pk_name=pk_name,
            tracked=bool(tracked),
        )
        tables[(schema.lower(), name.lower())] = table
        by_id[oid] = table
    instances: dict[str, CaptureInstance] = {}
    cdc_enabled = bool(int(meta.get("cdc_enabled") or 0))
    if cdc_enabled:
        rows = db.execute(
            "SELECT i.object_id, i.capture_instance, i.source_object_id, i.create_lsn, "
            "i.column_ids, ct.supports_net_changes, ct.index_name "
            'FROM _emu_instances AS i JOIN "cdc.change_tables" AS ct ON ct.object_id = i.object_id'
        ).fetchall()
        for oid, ci, source, create_lsn, column_ids, net, index_name in rows:
            captured = tuple(
                r[0]
                for r in db.execute(
                    'SELECT column_name FROM "cdc.captured_columns" WHERE object_id = ? '
                    "ORDER BY column_ordinal",
                    (oid,),
                )
            )
            key_cols = tuple(
                r[0]
                for r in db.execute(
                    'SELECT column_name FROM "cdc.index_columns" WHERE object_id = ? '
                    "ORDER BY index_ordinal",
                    (oid,),
                )
            )
            ct = by_id.get(oid)
            instances[ci.lower()] = CaptureInstance(
                name=ci,
                object_id=oid,
                source_object_id=source,
                change_table=ct.physical if ct else f"cdc.{ci}_CT",
                create_lsn=int(create_lsn),
                captured=captured,
                column_ids=tuple(json.loads(column_ids)),
                key_columns=key_cols,
                supports_net_changes=bool(net),
                index_name=index_name,
            )
    return Catalog(
        token=token,
        db_guid=str(meta.get("db_guid")),
        cdc_enabled=cdc_enabled,
        allow_snapshot=bool(int(meta.get("allow_snapshot") or 0)),
        tables=tables,
        tables_by_id=by_id,
        schemas=schemas,
        instances=instances,
    )
