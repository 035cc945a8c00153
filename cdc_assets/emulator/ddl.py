"""DDL: CREATE/ALTER/DROP TABLE and CREATE SCHEMA, with the CDC side effects SQL Server has.

- ``CREATE TABLE`` with SQL Server types (see :mod:`.types`), NULL/NOT NULL, DEFAULT constants
  (and ``GETDATE()``-style clocks, ``NEWID()``), PRIMARY KEY (column or table constraint, named
  or not), UNIQUE, ``IDENTITY(1,1)`` on a single-column integer primary key.
- ``ALTER TABLE ... ADD`` / ``DROP COLUMN``. On a table tracked by CDC the existing capture
  instances keep their shape: an added column is not captured, a dropped captured column yields
  NULL in later change rows. Both are recorded for ``cdc.ddl_history`` (written by the capture job
  when it passes the DDL's LSN, as SQL Server does).
- ``DROP TABLE`` of a tracked table removes its capture instances first (as SQL Server does).
- ``CREATE [UNIQUE] [NONCLUSTERED] INDEX`` / ``DROP INDEX ... ON``: SQLite indexes, listed in
  ``sys.indexes`` with the primary key and the UNIQUE constraints; DEFAULTs are listed in
  ``sys.default_constraints`` (see :mod:`.constraint_views`). FOREIGN KEY / REFERENCES are refused.

Column types are read from the statement text (sqlglot folds ``real``/``float``,
``text``/``ntext`` and ``decimal``/``numeric`` together).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from . import catalog as catalog_mod
from . import errors, statements, storage, transaction_log
from . import types as T
from .catalog import EmulatedTable
from .catalog_rows import (
    delete_column_default,
    delete_index,
    delete_table,
    drop_instance,
    insert_column,
    insert_table,
    record_default,
)
from .constraint_rows import record_index
from .plan import Plan, StatementContext
from .source_text import quoted, user_text
from .storage import quote
from .translate import Translator
from .type_parsing import parse_type_text
from .types import SqlType


@dataclass
class ColumnSpec:
    name: str
    type: SqlType
    nullable: bool = True
    default_sql: str | None = None
    default_definition: str | None = None  # sys.default_constraints.definition
    default_name: str | None = None  # CONSTRAINT <name> DEFAULT ...
    identity: bool = False
    unique: bool = False
    unique_name: str | None = None  # CONSTRAINT <name> UNIQUE


@statements.planner(exp.Create, exp.Alter, exp.Drop)
def plan_ddl(tr: Translator, node: exp.Expression, text: str) -> Plan:
    if isinstance(node, exp.Create):
        kind = str(node.args.get("kind") or "").upper()
        if kind == "TABLE":
            return _action(_create_table(tr, node, text))
        if kind == "SCHEMA":
            return _action(_create_schema(node))
        if kind.endswith("INDEX") and isinstance(node.this, exp.Index):
            return _action(_create_index(tr, node))
        raise errors.not_supported(f"CREATE {kind}")
    if isinstance(node, exp.Alter):
        if str(node.args.get("kind") or "").upper() != "TABLE":
            raise errors.not_supported(f"ALTER {node.args.get('kind')}")
        return _action(_alter_table(tr, node, text))
    if isinstance(node, exp.Drop):
        kind = str(node.args.get("kind") or "").upper()
        if kind == "TABLE":
            return _action(_drop_tables(tr, node))
        if kind == "INDEX":
            return _action(_drop_index(tr, node))
        raise errors.not_supported(f"DROP {kind}")
    raise errors.not_supported(user_text(text).split(" ", 1)[0].upper())


def _action(run: Callable[[StatementContext], None]) -> Plan:
    def payload(session: StatementContext, _params: Sequence[Any]) -> None:
        with session.write_scope():
            run(session)
        return None

    return Plan("action", payload=payload, writes=True)


# -- CREATE TABLE --------------------------------------------------------------------------------


def _column_type(node: exp.ColumnDef, text: str) -> SqlType:
    meta = node.this.meta if isinstance(node.this, exp.Identifier) else {}
    if "end" not in meta:
        kind = node.args.get("kind")
        if kind is None:
            raise errors.not_supported(f"the column definition {quoted(node, text)}")
        return parse_type_text(kind.sql("tsql"))[0]
    return parse_type_text(text, meta["end"] + 1)[0]


def _default_sql(tr: Translator, value: exp.Expression, column_type: SqlType) -> str:
    while isinstance(value, exp.Paren):
        value = value.this
    if isinstance(value, exp.CurrentTimestamp) or (
        isinstance(value, exp.Anonymous)
        and value.name.upper()
        in ("GETDATE", "SYSDATETIME", "GETUTCDATE", "SYSUTCDATETIME", "SYSDATETIMEOFFSET")
    ):
        name = "GETDATE" if isinstance(value, exp.CurrentTimestamp) else value.name.upper()
        clock = "utc" if "UTC" in name else ("offset" if "OFFSET" in name else "local")
        return f"(_emu_now('{clock}', '{column_type.sql}'))"
    if isinstance(value, exp.Uuid) or (
        isinstance(value, exp.Anonymous) and value.name.upper() == "NEWID"
    ):
        return "(_emu_newid())"
    if tr.is_value(value) and tr.param_index(value) is None:
        literal, _ = tr.literal_value(value)
        encoded = column_type.encode(literal)
        if encoded is None:
            return "NULL"
        if isinstance(encoded, bytes):
            return f"X'{encoded.hex()}'"
        if isinstance(encoded, str):
            return "'" + encoded.replace("'", "''") + "'"
        return repr(encoded) if isinstance(encoded, float) else str(encoded)
    raise errors.not_supported(f"the DEFAULT expression {tr.quote(value)}")


def _default_definition(value: exp.Expression) -> str:
    """A DEFAULT as SQL Server shows it in ``sys.default_constraints``: numbers in two pairs of
    parentheses (``((0))``, ``((-1.5))``), strings, NULL and functions in one (``('x')``,
    ``(N'x')``, ``(NULL)``, ``(getdate())``)."""
    while isinstance(value, exp.Paren):
        value = value.this
    if isinstance(value, exp.CurrentTimestamp):
        return "(getdate())"
    if isinstance(value, exp.Uuid):
        return "(newid())"
    if isinstance(value, exp.Anonymous) and not value.expressions:
        return f"({value.name.lower()}())"
    number = value.this if isinstance(value, exp.Neg) else value
    if isinstance(number, exp.Literal) and not number.is_string:
        return f"(({value.sql('tsql')}))"
    return f"({value.sql('tsql')})"


def _column_spec(tr: Translator, node: exp.ColumnDef, text: str) -> tuple[ColumnSpec, bool]:
    spec = ColumnSpec(node.name, _column_type(node, text))
    primary = False
    for constraint in node.constraints:
        kind = constraint.args.get("kind")
        if isinstance(kind, exp.NotNullColumnConstraint):
            spec.nullable = bool(kind.args.get("allow_null"))
        elif isinstance(kind, exp.PrimaryKeyColumnConstraint):
            primary = True
        elif isinstance(kind, exp.DefaultColumnConstraint):
            spec.default_sql = _default_sql(tr, kind.this, spec.type)
            spec.default_definition = _default_definition(kind.this)
            spec.default_name = constraint.name or None
        elif isinstance(kind, exp.GeneratedAsIdentityColumnConstraint):
            start = kind.args.get("start")
            step = kind.args.get("increment")
            if (start is not None and str(start.this) != "1") or (
                step is not None and str(step.this) != "1"
            ):
                raise errors.not_supported("IDENTITY with a seed or increment other than 1")
            spec.identity = True
        elif isinstance(kind, exp.UniqueColumnConstraint):
            spec.unique = True
            spec.unique_name = constraint.name or None
        elif isinstance(kind, exp.CollateColumnConstraint):
            if "_CI_" not in kind.sql("tsql").upper():
                raise errors.not_supported(f"the collation {quoted(kind, text)}")
        else:
            raise errors.not_supported(f"the column constraint {quoted(constraint, text)}")
    return spec, primary


def _key_names(node: exp.Expression) -> list[str]:
    names = []
    for item in node.expressions:
        target = item.this if isinstance(item, exp.Ordered) else item
        names.append(target.name)
    return names


def _create_table(
    tr: Translator, node: exp.Create, text: str
) -> Callable[[StatementContext], None]:
    schema_node = node.this
    if not isinstance(schema_node, exp.Schema):
        raise errors.not_supported("CREATE TABLE ... AS SELECT")
    table_node = schema_node.this
    name = table_node.name
    schema = table_node.db or "dbo"
    if name.startswith("#"):
        raise errors.not_supported("temporary tables")
    columns: list[ColumnSpec] = []
    key: list[str] = []
    pk_name: str | None = None
    uniques: list[tuple[str | None, list[str]]] = []
    for item in schema_node.expressions:
        if isinstance(item, exp.ColumnDef):
            spec, primary = _column_spec(tr, item, text)
            columns.append(spec)
            if primary:
                if key:
                    raise errors.server_error(
                        8110, f"Cannot add multiple PRIMARY KEY constraints to table '{name}'."
                    )
                key = [spec.name]
        elif isinstance(item, exp.Constraint):
            for inner in item.expressions:
                if isinstance(inner, exp.PrimaryKey):
                    if key:
                        raise errors.server_error(
                            8110, f"Cannot add multiple PRIMARY KEY constraints to table '{name}'."
                        )
                    key = _key_names(inner)
                    pk_name = item.name
                elif isinstance(inner, (exp.UniqueColumnConstraint,)):
                    uniques.append((item.name or None, _unique_columns(inner)))
                else:
                    raise errors.not_supported(f"the table constraint {quoted(item, text)}")
        elif isinstance(item, exp.PrimaryKey):
            if key:
                raise errors.server_error(
                    8110, f"Cannot add multiple PRIMARY KEY constraints to table '{name}'."
                )
            key = _key_names(item)
        elif isinstance(item, exp.UniqueColumnConstraint):
            uniques.append((None, _unique_columns(item)))
        else:
            raise errors.not_supported(f"the table element {quoted(item, text)}")
    by_name = {c.name.lower(): c for c in columns}
    if len(by_name) != len(columns):
        raise errors.server_error(2705, "Column names in each table must be unique.")
    for k in key:
        if k.lower() not in by_name:
            raise errors.server_error(
                1911, f"Column name '{k}' does not exist in the target table or view."
            )
        by_name[k.lower()].nullable = False
    for _, unique in uniques:
        for u in unique:
            if u.lower() not in by_name:
                raise errors.server_error(
                    1911, f"Column name '{u}' does not exist in the target table or view."
                )
    identity = [c for c in columns if c.identity]
    if identity:
        ident = identity[0]
        if (
            len(identity) > 1
            or not ident.type.is_integer
            or [k.lower() for k in key] != [ident.name.lower()]
        ):
            raise errors.not_supported("IDENTITY except on a single-column integer PRIMARY KEY")

    def run(session: StatementContext) -> None:
        db = session.db
        cat = session.refresh_catalog()
        if cat.find(name, schema) is not None:
            raise errors.server_error(
                2714, f"There is already an object named '{name}' in the database."
            )
        if schema.lower() not in cat.schemas:
            raise errors.server_error(
                2760,
                f'The specified schema name "{schema}" either does not exist or you do not have '
                "permission to use it.",
            )
        oid = storage.next_object_id(db)
        physical = f"{schema}.{name}"
        key_name = pk_name or (f"PK__{name[:8]}__{oid:X}" if key else None)
        parts = []
        for c in columns:
            if c.identity:
                parts.append(f"{quote(c.name)} INTEGER PRIMARY KEY AUTOINCREMENT")
                continue
            piece = f"{quote(c.name)} {c.type.decltype}"
            if not c.nullable:
                piece += " NOT NULL"
            if c.default_sql is not None:
                piece += f" DEFAULT {c.default_sql}"
            if c.unique:
                piece += " UNIQUE"
            parts.append(piece)
        if key and not identity:
            parts.append(
                "PRIMARY KEY (" + ", ".join(quote(by_name[k.lower()].name) for k in key) + ")"
            )
        for _, unique in uniques:
            parts.append("UNIQUE (" + ", ".join(quote(u) for u in unique) + ")")
        session.sqlite(f"CREATE TABLE {quote(physical)} ({', '.join(parts)})")
        insert_table(
            db,
            oid,
            cat.schemas[schema.lower()],
            name,
            physical,
            [(c.name, c.type, c.nullable, c.identity) for c in columns],
            shipped=False,
            pk_name=key_name,
        )
        ids = {c.name.lower(): cid for cid, c in enumerate(columns, start=1)}
        for ordinal, k in enumerate(key, start=1):
            db.execute(
                "INSERT INTO _emu_key_columns (object_id, column_id, key_ordinal) VALUES (?, ?, ?)",
                (oid, ids[k.lower()], ordinal),
            )
        for cid, c in enumerate(columns, start=1):
            _record_default(db, oid, name, cid, c)
            if c.unique:
                _record_unique(db, oid, name, c.unique_name, [cid])
        for unique_name, unique in uniques:
            _record_unique(db, oid, name, unique_name, [ids[u.lower()] for u in unique])
        storage.bump_catalog(db, (oid,))

    return run


def _unique_columns(node: exp.UniqueColumnConstraint) -> list[str]:
    return [c.name for c in node.this.expressions] if node.this else []


def _record_default(
    db: sqlite3.Connection, oid: int, table: str, cid: int, spec: ColumnSpec
) -> None:
    """The DEFAULT of column ``cid`` as a constraint, named as SQL Server names it when the DDL
    gives no name (``DF__<table>__<column>__<hex>``)."""
    if spec.default_definition is None:
        return
    (next_id,) = db.execute("SELECT next_object_id FROM _emu_state").fetchone()
    name = spec.default_name or f"DF__{table[:9]}__{spec.name[:5]}__{int(next_id):X}"
    record_default(
        db, oid, cid, name, spec.default_definition, system_named=spec.default_name is None
    )


def _record_unique(
    db: sqlite3.Connection, oid: int, table: str, name: str | None, column_ids: list[int]
) -> None:
    (next_id,) = db.execute("SELECT next_object_id FROM _emu_state").fetchone()
    record_index(
        db,
        oid,
        name or "",
        [(c, False) for c in column_ids],
        True,
        constraint=name or f"UQ__{table[:8]}__{int(next_id):X}",
        system_named=name is None,
    )


def _create_schema(node: exp.Create) -> Callable[[StatementContext], None]:
    target = node.this
    name = (target.db or target.name) if isinstance(target, exp.Table) else str(target)

    def run(session: StatementContext) -> None:
        db = session.db
        cat = session.refresh_catalog()
        if name.lower() in cat.schemas:
            raise errors.server_error(
                2714, f"There is already an object named '{name}' in the database."
            )
        (top,) = db.execute("SELECT MAX(schema_id) FROM _emu_schemas").fetchone()
        db.execute(
            "INSERT INTO _emu_schemas (schema_id, name) VALUES (?, ?)", (max(int(top), 5) + 1, name)
        )
        storage.bump_catalog(db, ())

    return run


# -- indexes (SQLite indexes, listed in sys.indexes / sys.index_columns) ----------------------


def _index_name(table: EmulatedTable, name: str) -> str:
    return f"{table.physical}.{name}"


def _index_id(db: sqlite3.Connection, table: EmulatedTable, name: str) -> int | None:
    """The index_id of the nonclustered index ``name`` of ``table`` (None: no such index)."""
    row = db.execute(
        "SELECT index_id FROM _emu_indexes WHERE object_id = ? AND name = ?",
        (table.object_id, name),
    ).fetchone()
    return None if row is None else int(row[0])


def _create_index(tr: Translator, node: exp.Create) -> Callable[[StatementContext], None]:
    index = node.this
    kind = str(node.args.get("kind") or "").upper()
    if kind.startswith("CLUSTERED"):
        raise errors.not_supported("CREATE CLUSTERED INDEX")
    params = index.args.get("params")
    columns = [
        (o.this.name if isinstance(o, exp.Ordered) else o.name, bool(o.args.get("desc")))
        for o in (params.args.get("columns") if params is not None else None) or []
    ]
    if not columns or (params is not None and params.args.get("include")):
        raise errors.not_supported(
            "INCLUDE columns" if params is not None and params.args.get("include") else "this index"
        )
    unique = bool(node.args.get("unique"))

    def run(session: StatementContext) -> None:
        table = _user_table(session.refresh_catalog(), index.args["table"], session.db_name)
        assert table.object_id is not None
        found = []
        for name, desc in columns:
            column = table.column(name)
            if column is None:
                raise errors.invalid_column(name)
            found.append((column.column_id, desc))
        if _index_id(session.db, table, index.name) is not None or (
            table.pk_name is not None and table.pk_name.lower() == index.name.lower()
        ):
            raise errors.server_error(
                1913,
                f"The operation failed because an index or statistics with name '{index.name}' "
                f"already exists on table '{table.display}'.",
            )
        body = ", ".join(f"{quote(n)}{' DESC' if desc else ''}" for n, desc in columns)
        session.sqlite(
            f"CREATE {'UNIQUE ' if unique else ''}INDEX {quote(_index_name(table, index.name))} "
            f"ON {quote(table.physical)} ({body})"
        )
        record_index(session.db, table.object_id, index.name, found, unique)

    return run


def _drop_index(tr: Translator, node: exp.Drop) -> Callable[[StatementContext], None]:
    on = node.args.get("cluster")
    target = on.this if on is not None else None
    names = [t.name for t in node.args.get("tables") or []]
    if not isinstance(target, exp.Table):
        raise errors.not_supported("DROP INDEX without ON <table>")

    def run(session: StatementContext) -> None:
        table = _user_table(session.refresh_catalog(), target, session.db_name)
        assert table.object_id is not None
        for name in names:
            index_id = _index_id(session.db, table, name)
            if index_id is None:
                if node.args.get("exists"):
                    continue
                raise errors.server_error(
                    3701,
                    f"Cannot drop the index '{table.display}.{name}', because it does not exist "
                    "or you do not have permission.",
                )
            (constraint,) = session.db.execute(
                "SELECT constraint_id FROM _emu_indexes WHERE object_id = ? AND index_id = ?",
                (table.object_id, index_id),
            ).fetchone()
            if constraint is not None:
                raise errors.server_error(
                    3723,
                    f"An explicit DROP INDEX is not allowed on index '{table.display}.{name}'. "
                    "It is being used for UNIQUE KEY constraint enforcement.",
                )
            session.sqlite(f"DROP INDEX IF EXISTS {quote(_index_name(table, name))}")
            delete_index(session.db, table.object_id, index_id)

    return run


# -- ALTER TABLE ---------------------------------------------------------------------------------


def _user_table(cat: catalog_mod.Catalog, node: exp.Table, db_name: str) -> EmulatedTable:
    table = cat.resolve(node.name, node.db or None, node.catalog or None, db_name)
    if table.kind != "user":
        raise errors.not_supported(f"ALTER/DROP of the system object {table.display}")
    return table


def _log_ddl(session: StatementContext, table: EmulatedTable, text: str) -> None:
    if not table.tracked or table.object_id is None:
        return
    session.db.execute(
        "INSERT INTO _emu_ddl_log (lsn, source_object_id, ddl_command, ddl_time, "
        "required_column_update) VALUES (NULL, ?, ?, ?, 0)",
        (table.object_id, text.strip(), T.DATETIME.encode(storage.now())),
    )
    assert session.tx is not None
    session.tx.ddl_logged = True


def _alter_table(tr: Translator, node: exp.Alter, text: str) -> Callable[[StatementContext], None]:
    table_node = node.this
    actions = node.args.get("actions") or []
    adds: list[ColumnSpec] = []
    drops: list[str] = []
    for action in actions:
        if isinstance(action, exp.ColumnDef):
            spec, primary = _column_spec(tr, action, text)
            if primary or spec.identity or spec.unique:
                raise errors.not_supported("ALTER TABLE ADD of a key or identity column")
            adds.append(spec)
        elif (
            isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN"
        ):
            drops.extend(c.name for c in action.args.get("tables") or [])
        else:
            raise errors.not_supported(f"ALTER TABLE ... {quoted(action, text)}")

    def run(session: StatementContext) -> None:
        db = session.db
        table = _user_table(session.refresh_catalog(), table_node, session.db_name)
        assert table.object_id is not None
        oid = table.object_id
        quoted = quote(table.physical)
        if adds:
            (next_cid,) = db.execute(
                "SELECT next_column_id FROM _emu_objects WHERE object_id = ?", (oid,)
            ).fetchone()
            for spec in adds:
                if table.column(spec.name) is not None:
                    raise errors.server_error(
                        2705,
                        f"Column names in each table must be unique. Column name '{spec.name}' in "
                        f"table '{table.display}' is specified more than once.",
                    )
                piece = f"ALTER TABLE {quoted} ADD COLUMN {quote(spec.name)} {spec.type.decltype}"
                if not spec.nullable:
                    if spec.default_sql is None:
                        if db.execute(f"SELECT 1 FROM {quoted} LIMIT 1").fetchone():
                            raise errors.server_error(
                                4901,
                                "ALTER TABLE only allows columns to be added that can contain "
                                "nulls, "
                                "or have a DEFAULT definition specified, or the column being "
                                "added is "
                                "an identity or timestamp column, or alternatively if none of the "
                                "previous conditions are satisfied the table must be empty to "
                                "allow "
                                f"addition of this column. Column '{spec.name}' cannot be added to "
                                f"non-empty table '{table.name}' because it does not satisfy these "
                                "conditions.",
                            )
                        piece += f" CHECK ({quote(spec.name)} IS NOT NULL)"
                    else:
                        piece += " NOT NULL"
                if spec.default_sql is not None:
                    piece += f" DEFAULT {spec.default_sql}"
                session.sqlite(piece)
                insert_column(db, oid, int(next_cid), spec.name, spec.type, spec.nullable)
                _record_default(db, oid, table.name, int(next_cid), spec)
                if table.tracked:
                    transaction_log.add_log_column(db, table, int(next_cid), spec.type.decltype)
                next_cid += 1
            db.execute(
                "UPDATE _emu_objects SET next_column_id = ?, modify_date = ? WHERE object_id = ?",
                (next_cid, T.DATETIME.encode(storage.now()), oid),
            )
        for name in drops:
            column = table.column(name)
            if column is None:
                raise errors.server_error(
                    4924,
                    f"ALTER TABLE DROP COLUMN failed because column '{name}' does not exist in "
                    f"table '{table.name}'.",
                )
            if column.name in table.key:
                raise errors.server_error(
                    5074, f"The object '{table.pk_name}' is dependent on column '{column.name}'."
                )
            dependent = db.execute(
                "SELECT i.name FROM _emu_index_columns AS c JOIN _emu_indexes AS i "
                "ON i.object_id = c.object_id AND i.index_id = c.index_id "
                "WHERE c.object_id = ? AND c.column_id = ? ORDER BY i.index_id",
                (oid, column.column_id),
            ).fetchone()
            if dependent is not None:
                raise errors.server_error(
                    5074, f"The index '{dependent[0]}' is dependent on column '{column.name}'."
                )
            if table.tracked:
                transaction_log.drop_triggers(db, oid)
            session.sqlite(f"ALTER TABLE {quoted} DROP COLUMN {quote(column.name)}")
            db.execute(
                "DELETE FROM _emu_columns WHERE object_id = ? AND column_id = ?",
                (oid, column.column_id),
            )
            delete_column_default(db, oid, column.column_id)
        storage.bump_catalog(db, (oid,))
        if table.tracked:
            transaction_log.install_triggers(db, session.refresh_catalog().tables_by_id[oid])
            _log_ddl(session, table, text)

    return run


# -- DROP TABLE ----------------------------------------------------------------------------------


def _drop_tables(tr: Translator, node: exp.Drop) -> Callable[[StatementContext], None]:
    tables = list(node.args.get("tables") or node.expressions or [node.this])
    if_exists = bool(node.args.get("exists"))

    def run(session: StatementContext) -> None:
        db = session.db
        for table_node in tables:
            cat = session.refresh_catalog()
            found = cat.find(table_node.name, table_node.db or None)
            if found is None or found.kind != "user":
                if if_exists and found is None:
                    continue
                if found is not None:
                    raise errors.not_supported(f"DROP TABLE of the system object {found.display}")
                raise errors.server_error(
                    3701,
                    f"Cannot drop the table '{table_node.sql('tsql')}', because it does not exist "
                    "or you do not have permission.",
                )
            assert found.object_id is not None
            instances = cat.instances_of(found.object_id)
            for instance in instances:
                drop_instance(db, instance)
            if found.tracked:
                transaction_log.drop_log(db, found.object_id)
                db.execute(
                    "DELETE FROM _emu_ddl_log WHERE source_object_id = ?", (found.object_id,)
                )
            session.sqlite(f"DROP TABLE {quote(found.physical)}")
            delete_table(db, found.object_id)
            storage.bump_catalog(db, (found.object_id, *(i.object_id for i in instances)))

    return run
