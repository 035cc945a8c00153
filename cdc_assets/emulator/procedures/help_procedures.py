"""The help procedures database tools and sqlcmd users call, and ``fn_listextendedproperty``.

Registered in :data:`.procedures.PROCEDURES` (``EXEC sp_help``, ``EXEC sys.sp_helpindex N't'``)
and :data:`.queries.TABLE_FUNCTIONS`; each answers with the result sets SQL Server documents
(column names, order and types). Indexes and constraints are read from the same ``sys.*`` views
clients query (``sys.objects``, ``sys.indexes``, ``sys.index_columns``, ``sys.key_constraints``,
``sys.default_constraints``: :func:`.constraint_views.table_indexes` and
:func:`.constraint_views.table_constraints`), so both name them alike:

- ``sp_help``: without a name the objects of ``sys.objects`` (Name, Owner, Object_type: tables
  and their PRIMARY KEY, UNIQUE and DEFAULT constraints) and the user-defined types (none); with
  the name of a table: the object, its columns, its identity column, its ROWGUIDCOL, its
  filegroup, its indexes and its constraints (``PRIMARY KEY (clustered)`` / ``UNIQUE
  (non-clustered)`` with their keys, ``DEFAULT on column c`` with its definition ``((0))``, by
  name, as ``sp_helpconstraint``), each a result set (a view stops after the ROWGUIDCOL set).
  Unknown object: error 15009.
- ``sp_helpindex``: index_name, index_description, index_keys (descending keys as ``col(-)``),
  by name; a table without indexes returns no result set (SQL Server prints a message instead).
- ``sp_server_info``: SQL Server 2022's attribute rows (``@attribute_id`` picks one).
- ``fn_listextendedproperty(...)`` / ``sys.fn_listextendedproperty(...)``: objtype, objname,
  name, value; always empty, since the emulator stores no extended properties.

SQL Server's informational messages ("The object 't' does not have any indexes ...") are not
sent: the emulator has no message channel.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from decimal import Decimal
from typing import Any

from sqlglot import exp

from .. import errors
from ..catalog.catalog import EmulatedTable
from ..catalog.constraint_views import IndexRow, table_constraints, table_indexes
from ..catalog.storage import quote
from ..translate import queries
from ..translate.plan import Result, StatementContext
from ..translate.scope import Scope
from ..translate.system_functions import PRODUCT_VERSION
from ..values import types as T
from ..values.udfs import split_object_name
from .procedures import PROCEDURES, Procedure

_YES, _NO, _NA = "yes", "no", "(n/a)"
_FILEGROUP = "PRIMARY"
_COLLATION = "SQL_Latin1_General_CP1_CI_AS"
# sp_help shows Prec and Scale for the types whose name occurs in this list (SQL Server's
# @precscaletypes, searched with CHARINDEX: "datetime" matches inside "datetime2")
_PRECSCALE_TYPES = (
    "tinyint,smallint,decimal,int,bigint,real,money,float,numeric,smallmoney,date,time,"
    "datetime2,datetimeoffset,"
)
_ANSI_TRIM_TYPES = ("char", "varchar", "binary", "varbinary")


def _chain(results: list[Result]) -> Result | None:
    """The first result set, carrying the others as its ``more``."""
    if not results:
        return None
    first = results[0]
    first.more = tuple(results[1:])
    return first


def _arg(args: dict[str, Any], key: str) -> Any:
    """An argument's value; None when left out, NULL or ``DEFAULT`` (a bare sentinel object)."""
    value = args.get(key)
    return None if type(value) is object else value


# -- object names --------------------------------------------------------------------------------


def _name_parts(text: str) -> tuple[str | None, ...]:
    """``[dbo].[order lines]`` / ``dbo.t`` / ``order lines`` -> its parts, object last."""
    parts = split_object_name(text)
    if not parts and "." not in text and text.strip():
        parts = (text.strip(),)  # a one-part name with blanks, unbracketed
    return parts


def _find_object(session: StatementContext, objname: str) -> EmulatedTable:
    """The table or view ``objname`` names (15009 if none, 15250 for another database)."""
    cat = session.refresh_catalog()
    parts = _name_parts(objname)
    if len(parts) == 3 and parts[0] and parts[0].lower() != session.db_name.lower():
        raise errors.server_error(
            15250,
            "The database name component of the object qualifier must be the name of the "
            "current database.",
        )
    if not parts or len(parts) > 3 or not parts[-1]:
        raise _no_object(objname, session.db_name)
    schema = parts[-2] if len(parts) >= 2 else None
    try:
        return cat.resolve(parts[-1], schema or None, None, session.db_name)
    except errors.Error as exc:
        if exc.number == 208:
            raise _no_object(objname, session.db_name) from None
        raise


def _no_object(objname: str, db_name: str) -> errors.Error:
    return errors.server_error(
        15009,
        f"The object '{objname}' does not exist in database '{db_name}' or is invalid for this "
        "operation.",
    )


def _is_view(table: EmulatedTable) -> bool:
    return table.kind == "system" and table.schema.lower() in ("sys", "information_schema")


def _object_type(table: EmulatedTable) -> str:
    return "view" if _is_view(table) else "user table"


def _create_date(session: StatementContext, table: EmulatedTable) -> dt.datetime | None:
    if table.object_id is not None:
        row = session.db.execute(
            "SELECT create_date FROM _emu_objects WHERE object_id = ?", (table.object_id,)
        ).fetchone()
        if row is not None:
            return row[0]  # type: ignore[no-any-return]
    row = session.db.execute(  # a system object: the database's creation
        f"SELECT value AS \"d [{T.DATETIME.converter}]\" FROM _emu_meta WHERE key = 'create_date'"
    ).fetchone()
    return None if row is None else row[0]  # type: ignore[no-any-return]


# -- indexes -------------------------------------------------------------------------------------


def _description(index: IndexRow) -> str:
    """sp_helpindex's index_description: ``clustered, unique, primary key located on PRIMARY``."""
    words = ["clustered" if index.clustered else "nonclustered"]
    if index.is_unique:
        words.append("unique")
    if index.is_primary_key:
        words.append("primary key")
    elif index.is_unique_constraint:
        words.append("unique key")
    return f"{', '.join(words)} located on {_FILEGROUP}"


def _key_text(index: IndexRow) -> str:
    """The index's keys as sp_helpindex lists them, descending ones as ``col(-)``."""
    return ", ".join(f"{name}(-)" if desc else name for name, desc in index.keys)


def _indexes(db: sqlite3.Connection, table: EmulatedTable) -> list[IndexRow]:
    """The rows ``sys.indexes`` has for ``table``, by name (none for a system object)."""
    if table.kind == "system" or table.object_id is None:
        return []
    return sorted(table_indexes(db, table.object_id), key=lambda i: i.name.lower())


_INDEX_COLUMNS = [
    ("index_name", T.SYSNAME),
    ("index_description", T.varchar(210)),
    ("index_keys", T.nvarchar(2078)),
]


def _index_result(indexes: list[IndexRow]) -> Result | None:
    if not indexes:
        return None  # SQL Server prints "... does not have any indexes ..." instead
    return Result.of(_INDEX_COLUMNS, [(i.name, _description(i), _key_text(i)) for i in indexes])


def _helpindex(session: StatementContext, args: dict[str, Any]) -> Result | None:
    objname = _arg(args, "objname")
    if objname is None:
        raise errors.server_error(
            201,
            "Procedure or function 'sp_helpindex' expects parameter '@objname', which was not "
            "supplied.",
        )
    table = _find_object(session, str(objname))
    return _index_result(_indexes(session.db, table))


# -- sp_help -------------------------------------------------------------------------------------

_OBJECT_LIST_COLUMNS = [
    ("Name", T.nvarchar(128)),
    ("Owner", T.nvarchar(128)),
    ("Object_type", T.nvarchar(31)),
]
_USER_TYPE_COLUMNS = [
    ("User_type", T.SYSNAME),
    ("Storage_type", T.SYSNAME),
    ("Length", T.SMALLINT),
    ("Prec", T.INT),
    ("Scale", T.INT),
    ("Nullable", T.varchar(35)),
    ("Default_name", T.SYSNAME),
    ("Rule_name", T.SYSNAME),
    ("Collation", T.SYSNAME),
]
_OBJECT_COLUMNS = [
    ("Name", T.nvarchar(128)),
    ("Owner", T.nvarchar(128)),
    ("Type", T.nvarchar(31)),
    ("Created_datetime", T.DATETIME),
]
_COLUMN_COLUMNS = [
    ("Column_name", T.nvarchar(128)),
    ("Type", T.nvarchar(128)),
    ("Computed", T.varchar(35)),
    ("Length", T.INT),
    ("Prec", T.SqlType("char", length=5)),
    ("Scale", T.SqlType("char", length=5)),
    ("Nullable", T.varchar(35)),
    ("TrimTrailingBlanks", T.varchar(35)),
    ("FixedLenNullInSource", T.varchar(35)),
    ("Collation", T.SYSNAME),
]
_IDENTITY_COLUMNS = [
    ("Identity", T.nvarchar(128)),
    ("Seed", T.SqlType("numeric", precision=38, scale=0)),
    ("Increment", T.SqlType("numeric", precision=38, scale=0)),
    ("Not For Replication", T.INT),
]
_CONSTRAINT_COLUMNS = [
    ("constraint_type", T.nvarchar(146)),
    ("constraint_name", T.nvarchar(128)),
    ("delete_action", T.nvarchar(9)),
    ("update_action", T.nvarchar(9)),
    ("status_enabled", T.varchar(8)),
    ("status_for_replication", T.varchar(19)),
    ("constraint_keys", T.nvarchar(2078)),
]


# sp_help's Object_type of each sys.objects type (SQL Server's spt_values, type 'O9T')
_OBJECT_TYPES = {
    "U": "user table",
    "PK": "primary key cns",
    "UQ": "unique key cns",
    "D": "default (maybe cns)",
}


def _object_list(session: StatementContext) -> Result | None:
    """``sp_help`` without a name: every object of ``sys.objects`` (tables and their
    constraints), then the user-defined types (none)."""
    rows = session.db.execute(
        'SELECT o.name, s.name, o.type FROM "sys.objects" AS o '
        "JOIN _emu_schemas AS s ON s.schema_id = o.schema_id"
    ).fetchall()
    listed = [(name, owner, _OBJECT_TYPES[kind.strip()]) for name, owner, kind in rows]
    # SQL Server: ORDER BY Owner, Object_type DESC, Name
    listed.sort(key=lambda r: r[0].lower())
    listed.sort(key=lambda r: r[2], reverse=True)
    listed.sort(key=lambda r: r[1].lower())
    return _chain([Result.of(_OBJECT_LIST_COLUMNS, listed), Result.of(_USER_TYPE_COLUMNS, [])])


def _padded(value: int | None) -> str | None:
    """``CONVERT(char(5), value)``: left-aligned, blank-padded."""
    return None if value is None else str(value).ljust(5)


def _column_row(column_name: str, t: T.SqlType, nullable: bool) -> tuple[Any, ...]:
    name = t.name
    shows_precision = name in _PRECSCALE_TYPES
    if shows_precision:
        precision = _padded(t.sys_precision)
        scale = None if name in ("float", "real") else _padded(t.sys_scale)
    else:
        precision = scale = " " * 5
    ansi = name in _ANSI_TRIM_TYPES
    return (
        column_name,
        name,
        _NO,
        t.max_length,
        precision,
        scale,
        _YES if nullable else _NO,
        _NO if ansi else _NA,
        (_YES if nullable else _NO) if ansi else _NA,
        _COLLATION if name in ("char", "varchar", "nchar", "nvarchar", "text", "ntext") else None,
    )


def _constraints(
    db: sqlite3.Connection, table: EmulatedTable, indexes: list[IndexRow]
) -> list[tuple[Any, ...]]:
    """sp_help's constraint rows (sp_helpconstraint's): the PRIMARY KEY and UNIQUE constraints
    with their index's keys, the DEFAULTs with their definition, ordered by name."""
    if table.kind == "system" or table.object_id is None:
        return []
    by_id = {i.index_id: i for i in indexes}
    rows = []
    for constraint in table_constraints(db, table.object_id):
        if constraint.type == "D":
            kind = f"DEFAULT on column {constraint.column}"
            keys = constraint.definition
        else:
            index = by_id.get(constraint.unique_index_id or 0)
            kind = "PRIMARY KEY" if constraint.type == "PK" else "UNIQUE"
            kind += " (clustered)" if index is not None and index.clustered else " (non-clustered)"
            keys = None if index is None else _key_text(index)
        rows.append((kind, constraint.name, _NA, _NA, _NA, _NA, keys))
    return sorted(rows, key=lambda r: r[1].lower())


def _describe(session: StatementContext, objname: str) -> Result | None:
    table = _find_object(session, objname)
    results = [
        Result.of(
            _OBJECT_COLUMNS,
            [(table.name, table.schema, _object_type(table), _create_date(session, table))],
        ),
        Result.of(
            _COLUMN_COLUMNS, [_column_row(c.name, c.type, c.nullable) for c in table.columns]
        ),
    ]
    identity = next((c for c in table.columns if c.identity), None)
    results.append(
        Result.of(
            _IDENTITY_COLUMNS,
            [(identity.name, Decimal(1), Decimal(1), 0)]
            if identity is not None
            else [("No identity column defined.", None, None, None)],
        )
    )
    results.append(Result.of([("RowGuidCol", T.SYSNAME)], [("No rowguidcol column defined.",)]))
    if not _is_view(table):
        results.append(Result.of([("Data_located_on_filegroup", T.nvarchar(128))], [(_FILEGROUP,)]))
        indexes = _indexes(session.db, table)
        index_result = _index_result(indexes)
        if index_result is not None:
            results.append(index_result)
        constraints = _constraints(session.db, table, indexes)
        if constraints:  # else SQL Server prints "No constraints are defined on object ..."
            results.append(Result.of(_CONSTRAINT_COLUMNS, constraints))
    return _chain(results)


def _help(session: StatementContext, args: dict[str, Any]) -> Result | None:
    objname = _arg(args, "objname")
    if objname is None:
        return _object_list(session)
    return _describe(session, str(objname))


# -- sp_server_info ------------------------------------------------------------------------------

_MAJOR, _MINOR, _BUILD, _ = PRODUCT_VERSION.split(".")
SERVER_INFO: tuple[tuple[int, str, str], ...] = (
    (1, "DBMS_NAME", "Microsoft SQL Server"),
    (2, "DBMS_VER", f"Microsoft SQL Server 2022 - {PRODUCT_VERSION}"),
    (10, "OWNER_TERM", "owner"),
    (11, "TABLE_TERM", "table"),
    (12, "MAX_OWNER_NAME_LENGTH", "128"),
    (13, "TABLE_LENGTH", "128"),
    (14, "MAX_QUAL_LENGTH", "128"),
    (15, "COLUMN_LENGTH", "128"),
    (16, "IDENTIFIER_CASE", "MIXED"),
    (17, "TX_ISOLATION", "2"),
    (
        18,
        "COLLATION_SEQ",
        "charset=iso_1 sort_order=nocase_iso charset_num=1 sort_order_num=52",
    ),
    (19, "SAVEPOINT_SUPPORT", "Y"),
    (20, "MULTI_RESULT_SETS", "Y"),
    (22, "ACCESSIBLE_TABLES", "Y"),
    (100, "USERID_LENGTH", "128"),
    (101, "QUALIFIER_TERM", "database"),
    (102, "NAMED_TRANSACTIONS", "Y"),
    (103, "SPROC_AS_LANGUAGE", "Y"),
    (104, "ACCESSIBLE_SPROC", "Y"),
    (105, "MAX_INDEX_COLS", "16"),
    (106, "RENAME_TABLE", "Y"),
    (107, "RENAME_COLUMN", "Y"),
    (108, "DROP_COLUMN", "Y"),
    (109, "INCREASE_COLUMN_LENGTH", "Y"),
    (110, "DDL_IN_TRANSACTION", "Y"),
    (111, "DESCENDING_INDEXES", "Y"),
    (112, "SP_RENAME", "Y"),
    (113, "REMOTE_SPROC", "Y"),
    (500, "SYS_SPROC_VERSION", f"{int(_MAJOR):02d}.{int(_MINOR):02d}.{_BUILD}"),
)
_SERVER_INFO_COLUMNS = [
    ("attribute_id", T.INT),
    ("attribute_name", T.varchar(60)),
    ("attribute_value", T.varchar(255)),
]


def _server_info(session: StatementContext, args: dict[str, Any]) -> Result:
    wanted = _arg(args, "attribute_id")
    rows = list(SERVER_INFO)
    if wanted is not None:
        rows = [r for r in rows if r[0] == int(wanted)]
    return Result.of(_SERVER_INFO_COLUMNS, rows)


# -- fn_listextendedproperty ---------------------------------------------------------------------

_EXTENDED_PROPERTY_COLUMNS: list[tuple[str, T.SqlType | None]] = [
    ("objtype", T.SYSNAME),
    ("objname", T.SYSNAME),
    ("name", T.SYSNAME),
    ("value", T.nvarchar(4000)),  # sql_variant in SQL Server; the emulator has no sql_variant
]


def _list_extended_property(
    tr: queries.QueryTranslation,
    call: exp.Expression,
    args: list[exp.Expression],
    scope: Scope,
) -> tuple[str, list[tuple[str, T.SqlType | None]]]:
    """``fn_listextendedproperty(property, level0 type, name, level1 type, name, level2 type,
    name)``: no rows (the emulator stores no extended properties)."""
    if len(args) < 7:
        raise errors.server_error(
            216, "Parameters were not supplied for the function 'fn_listextendedproperty'."
        )
    if len(args) > 7:
        raise errors.server_error(
            8144, "Procedure or function fn_listextendedproperty has too many arguments specified."
        )
    for arg in args:
        tr.expr(arg, scope)  # unknown columns and the like are still errors
    names = ", ".join(f"NULL AS {quote(n)}" for n, _ in _EXTENDED_PROPERTY_COLUMNS)
    return f"SELECT {names} WHERE 0", list(_EXTENDED_PROPERTY_COLUMNS)


PROCEDURES.update(
    {
        p.name.lower(): p
        for p in (
            Procedure("sp_help", ("objname",), (), _help),
            Procedure("sp_helpindex", ("objname",), ("objname",), _helpindex),
            Procedure("sp_server_info", ("attribute_id",), (), _server_info),
        )
    }
)
queries.TABLE_FUNCTIONS["fn_listextendedproperty"] = _list_extended_property
