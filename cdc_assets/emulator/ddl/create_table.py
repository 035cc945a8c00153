"""CREATE TABLE: its column definitions read from the statement (SQL Server types, NULL/NOT NULL,
DEFAULT constants and clocks, IDENTITY, UNIQUE, PRIMARY KEY) and the table created with its
catalog, key, DEFAULT and UNIQUE constraint rows. ``ALTER TABLE ... ADD`` reads its columns here
too (:mod:`.alter_table`).

Column types are read from the statement text (sqlglot folds ``real``/``float``,
``text``/``ntext`` and ``decimal``/``numeric`` together).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

from .. import errors
from ..batches.source_text import quoted
from ..catalog import storage
from ..catalog.catalog_rows import insert_table, record_default
from ..catalog.constraint_rows import record_index
from ..catalog.storage import quote
from ..translate.plan import StatementContext
from ..translate.translate import Translator
from ..values.type_parsing import parse_type_text
from ..values.types import SqlType


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
    if isinstance(value, exp.CurrentTimestampLTZ):  # sqlglot's SYSDATETIMEOFFSET()
        return f"(_emu_now('offset', '{column_type.sql}'))"
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
    if isinstance(value, exp.CurrentTimestampLTZ):
        return "(sysdatetimeoffset())"
    if isinstance(value, exp.Uuid):
        return "(newid())"
    if isinstance(value, exp.Anonymous) and not value.expressions:
        return f"({value.name.lower()}())"
    number = value.this if isinstance(value, exp.Neg) else value
    if isinstance(number, exp.Literal) and not number.is_string:
        return f"(({value.sql('tsql')}))"
    return f"({value.sql('tsql')})"


def column_spec(tr: Translator, node: exp.ColumnDef, text: str) -> tuple[ColumnSpec, bool]:
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
        elif isinstance(kind, exp.Reference):
            check_reference(tr, kind, constraint.name or node.name)
        elif isinstance(kind, exp.CollateColumnConstraint):
            if "_CI_" not in kind.sql("tsql").upper():
                raise errors.not_supported(f"the collation {quoted(kind, text)}")
        else:
            raise errors.not_supported(f"the column constraint {quoted(constraint, text)}")
    return spec, primary


def check_reference(tr: Translator, reference: exp.Reference, constraint: str) -> None:
    """A FOREIGN KEY / REFERENCES constraint is accepted when the table and the columns it
    references exist (1767 / 1770 otherwise), and neither enforced nor listed in
    ``sys.foreign_keys`` (see CONTRACT.md)."""
    target = reference.this
    table_node = target.this if isinstance(target, exp.Schema) else target
    table = tr.catalog.find(table_node.name, table_node.db or None)
    if table is None:
        raise errors.server_error(
            1767, f"Foreign key '{constraint}' references invalid table '{table_node.sql('tsql')}'."
        )
    names = {c.name.lower() for c in table.columns}
    for column in target.expressions if isinstance(target, exp.Schema) else ():
        if column.name.lower() not in names:
            raise errors.server_error(
                1770,
                f"Foreign key '{constraint}' references invalid column '{column.name}' in "
                f"referenced table '{table.display}'.",
            )


def _key_names(node: exp.Expression) -> list[str]:
    names = []
    for item in node.expressions:
        target = item.this if isinstance(item, exp.Ordered) else item
        names.append(target.name)
    return names


def create_table(tr: Translator, node: exp.Create, text: str) -> Callable[[StatementContext], None]:
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
            spec, primary = column_spec(tr, item, text)
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
                elif isinstance(inner, exp.ForeignKey) and inner.args.get("reference"):
                    check_reference(tr, inner.args["reference"], item.name or name)
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
            record_column_default(db, oid, name, cid, c)
            if c.unique:
                _record_unique(db, oid, name, c.unique_name, [cid])
        for unique_name, unique in uniques:
            _record_unique(db, oid, name, unique_name, [ids[u.lower()] for u in unique])
        storage.bump_catalog(db, (oid,))

    return run


def _unique_columns(node: exp.UniqueColumnConstraint) -> list[str]:
    return [c.name for c in node.this.expressions] if node.this else []


def record_column_default(
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
