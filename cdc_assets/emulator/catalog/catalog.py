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
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from .. import errors
from ..values.type_parsing import parse_type_text
from ..values.types import SqlType
from .system_objects import SYSTEM_BY_NAME, SystemObject


@dataclass(frozen=True)
class Column:
    """One column: SQL Server name, type, nullability (column_id as in ``sys.columns``)."""

    column_id: int
    name: str
    type: SqlType
    nullable: bool = True
    identity: bool = False


@dataclass(frozen=True)
class EmulatedTable:
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
    tables: dict[tuple[str, str], EmulatedTable]
    tables_by_id: dict[int, EmulatedTable]
    schemas: dict[str, int]
    instances: dict[str, CaptureInstance]
    instance_names: dict[int, str] = field(default_factory=dict)  # change table id -> key
    change_seq: int = 0  # the last ``_emu_catalog_changes`` row this catalog includes

    def instances_of(self, source_object_id: int) -> list[CaptureInstance]:
        found = [i for i in self.instances.values() if i.source_object_id == source_object_id]
        return sorted(found, key=lambda i: i.create_lsn)

    def resolve(
        self, name: str, schema: str | None = None, database: str | None = None, db_name: str = ""
    ) -> EmulatedTable:
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

    def find(self, name: str, schema: str | None = None) -> EmulatedTable | None:
        return self.tables.get(((schema or "dbo").lower(), name.lower()))


_SYSTEM_TABLES: dict[str, EmulatedTable] = {}


def system_table(obj: SystemObject) -> EmulatedTable:
    table = _SYSTEM_TABLES.get(obj.physical)
    if table is None:
        columns = tuple(Column(i + 1, name, t, True) for i, (name, t) in enumerate(obj.columns))
        table = EmulatedTable(obj.schema, obj.name, obj.physical, columns, "system")
        _SYSTEM_TABLES[obj.physical] = table
    return table


def read_token(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT catalog_token FROM _emu_state").fetchone()[0])


_CACHE: OrderedDict[tuple[str, int], Catalog] = OrderedDict()
_CACHE_SIZE = 16
_CACHE_LOCK = threading.Lock()
_MAX_CHANGED_OBJECTS = 2000  # more changed objects than this since a catalog: load it anew


def refresh(db: sqlite3.Connection, current: Catalog | None) -> Catalog:
    """The catalog at the database's current token (call inside one read snapshot).

    ``current`` (a catalog this connection loaded before) is kept when the token is unchanged. Else
    a catalog another connection of this process has at the same token is reused; else
    ``current`` is brought up to date from ``_emu_catalog_changes`` when the changes since it are
    on record: only the objects DDL touched are read again, so creating N tables one by one costs
    O(N), not O(N²). Else the whole catalog is read.
    """
    token = read_token(db)
    if current is not None and current.token == token:
        return current
    guid = str(db.execute("SELECT value FROM _emu_meta WHERE key = 'db_guid'").fetchone()[0])
    key = (guid, token)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None:
            _CACHE.move_to_end(key)
            return cached
    catalog = _apply_changes(db, current, token) if current is not None else None
    if catalog is None:
        catalog = load(db)
    with _CACHE_LOCK:
        _CACHE[key] = catalog
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return catalog


def _apply_changes(db: sqlite3.Connection, current: Catalog, token: int) -> Catalog | None:
    """``current`` updated with the objects changed since it, or None if a full load is needed."""
    rows = db.execute(
        "SELECT seq, token, object_id FROM _emu_catalog_changes WHERE seq >= ? ORDER BY seq",
        (current.change_seq,),
    ).fetchall()
    if current.change_seq > 0:
        # the change that made ``current`` must still be on record (not rolled back, not pruned)
        if not rows or rows[0][0] != current.change_seq or rows[0][1] != current.token:
            return None
        rows = rows[1:]
    elif rows and rows[0][0] != 1:
        return None
    if not rows or rows[-1][1] != token:
        return None
    changed: set[int] = set()
    expected = current.change_seq + 1
    for seq, _token, object_id in rows:
        if seq != expected or object_id is None:
            return None  # a gap (pruned) or a change of the whole catalog
        expected += 1
        if object_id > 0:
            changed.add(int(object_id))
    if len(changed) > _MAX_CHANGED_OBJECTS:
        return None
    meta, schemas, schema_names = _read_database(db)
    cdc_enabled = bool(int(str(meta.get("cdc_enabled") or 0)))
    # copies (C speed) changed in place: no Python loop over every table per DDL statement
    tables = dict(current.tables)
    by_id = dict(current.tables_by_id)
    instances = dict(current.instances) if cdc_enabled else {}
    instance_names = dict(current.instance_names) if cdc_enabled else {}
    for oid in changed:
        old = by_id.pop(oid, None)
        if old is not None:
            tables.pop((old.schema.lower(), old.name.lower()), None)
        name = instance_names.pop(oid, None)
        if name is not None:
            del instances[name]
    for table in _read_tables(db, schema_names, changed):
        assert table.object_id is not None
        tables[(table.schema.lower(), table.name.lower())] = table
        by_id[table.object_id] = table
    if cdc_enabled:
        for name, instance in _read_instances(db, by_id, changed).items():
            instances[name] = instance
            instance_names[instance.object_id] = name
    return _catalog(token, meta, schemas, tables, by_id, instances, instance_names, rows[-1][0])


def _catalog(
    token: int,
    meta: dict[str, object],
    schemas: dict[str, int],
    tables: dict[tuple[str, str], EmulatedTable],
    by_id: dict[int, EmulatedTable],
    instances: dict[str, CaptureInstance],
    instance_names: dict[int, str],
    change_seq: int,
) -> Catalog:
    return Catalog(
        token=token,
        db_guid=str(meta.get("db_guid")),
        cdc_enabled=bool(int(str(meta.get("cdc_enabled") or 0))),
        allow_snapshot=bool(int(str(meta.get("allow_snapshot") or 0))),
        tables=tables,
        tables_by_id=by_id,
        schemas=schemas,
        instances=instances,
        instance_names=instance_names,
        change_seq=change_seq,
    )


def _read_database(
    db: sqlite3.Connection,
) -> tuple[dict[str, object], dict[str, int], dict[int, str]]:
    meta = dict(db.execute("SELECT key, value FROM _emu_meta").fetchall())
    pairs = db.execute("SELECT schema_id, name FROM _emu_schemas").fetchall()
    schemas = {name.lower(): sid for sid, name in pairs}
    schema_names = {sid: name for sid, name in pairs}
    return meta, schemas, schema_names


def _in_clause(column: str, ids: set[int] | None) -> str:
    if ids is None:
        return ""
    return f" WHERE {column} IN ({', '.join(str(int(i)) for i in sorted(ids)) or 'NULL'})"


def _read_tables(
    db: sqlite3.Connection, schema_names: dict[int, str], ids: set[int] | None
) -> list[EmulatedTable]:
    """The tables with object id in ``ids`` (all if None)."""
    columns: dict[int, list[Column]] = {}
    for oid, cid, name, type_sql, nullable, identity in db.execute(
        "SELECT object_id, column_id, name, type_sql, is_nullable, is_identity FROM _emu_columns"
        + _in_clause("object_id", ids)
        + " ORDER BY object_id, column_id"
    ):
        sql_type, _ = parse_type_text(type_sql)
        columns.setdefault(oid, []).append(
            Column(cid, name, sql_type, bool(nullable), bool(identity))
        )
    keys: dict[int, list[int]] = {}
    for oid, cid in db.execute(
        "SELECT object_id, column_id FROM _emu_key_columns"
        + _in_clause("object_id", ids)
        + " ORDER BY object_id, key_ordinal"
    ):
        keys.setdefault(oid, []).append(cid)
    tables = []
    for oid, sid, name, physical, pk_name, tracked, shipped in db.execute(
        "SELECT object_id, schema_id, name, physical, pk_name, is_tracked_by_cdc, "
        "is_ms_shipped FROM _emu_objects" + _in_clause("object_id", ids)
    ):
        cols = tuple(columns.get(oid, ()))
        by_cid = {c.column_id: c.name for c in cols}
        key = tuple(by_cid[c] for c in keys.get(oid, []) if c in by_cid)
        tables.append(
            EmulatedTable(
                schema_names.get(sid, "dbo"),
                name,
                physical,
                cols,
                "change" if shipped else "user",
                object_id=oid,
                key=key,
                pk_name=pk_name,
                tracked=bool(tracked),
            )
        )
    return tables


def _column_names(
    db: sqlite3.Connection, table: str, ordinal: str, ids: set[int]
) -> dict[int, list[str]]:
    """``column_name`` of ``table`` by ``object_id`` (those in ``ids``), in ``ordinal`` order."""
    names: dict[int, list[str]] = {}
    for oid, name in db.execute(
        f"SELECT object_id, column_name FROM {table}"
        + _in_clause("object_id", ids)
        + f" ORDER BY object_id, {ordinal}"
    ):
        names.setdefault(oid, []).append(name)
    return names


def _read_instances(
    db: sqlite3.Connection, by_id: dict[int, EmulatedTable], ids: set[int] | None
) -> dict[str, CaptureInstance]:
    """The capture instances whose change table's object id is in ``ids`` (all if None)."""
    rows = db.execute(
        "SELECT i.object_id, i.capture_instance, i.source_object_id, i.create_lsn, "
        "i.column_ids, ct.supports_net_changes, ct.index_name "
        'FROM _emu_instances AS i JOIN "cdc.change_tables" AS ct ON ct.object_id = i.object_id'
        + _in_clause("i.object_id", ids)
    ).fetchall()
    if not rows:
        return {}
    wanted = {int(r[0]) for r in rows}
    captured = _column_names(db, '"cdc.captured_columns"', "column_ordinal", wanted)
    key_columns = _column_names(db, '"cdc.index_columns"', "index_ordinal", wanted)
    instances: dict[str, CaptureInstance] = {}
    for oid, ci, source, create_lsn, column_ids, net, index_name in rows:
        ct = by_id.get(oid)
        instances[ci.lower()] = CaptureInstance(
            name=ci,
            object_id=oid,
            source_object_id=source,
            change_table=ct.physical if ct else f"cdc.{ci}_CT",
            create_lsn=int(create_lsn),
            captured=tuple(captured.get(oid, ())),
            column_ids=tuple(json.loads(column_ids)),
            key_columns=tuple(key_columns.get(oid, ())),
            supports_net_changes=bool(net),
            index_name=index_name,
        )
    return instances


def load(db: sqlite3.Connection) -> Catalog:
    """Read the whole catalog (call inside the caller's current read snapshot)."""
    token = read_token(db)
    (change_seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM _emu_catalog_changes").fetchone()
    meta, schemas, schema_names = _read_database(db)
    by_id = {t.object_id: t for t in _read_tables(db, schema_names, None) if t.object_id}
    tables = {(t.schema.lower(), t.name.lower()): t for t in by_id.values()}
    cdc_enabled = bool(int(str(meta.get("cdc_enabled") or 0)))
    instances = _read_instances(db, by_id, None) if cdc_enabled else {}
    names = {i.object_id: name for name, i in instances.items()}
    return _catalog(token, meta, schemas, tables, by_id, instances, names, int(change_seq))
