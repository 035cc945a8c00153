"""The ODBC catalog procedures: ``sp_tables``, ``sp_columns`` / ``sp_columns_100``, ``sp_pkeys``,
``sp_fkeys``, ``sp_statistics`` / ``sp_statistics_100`` and ``sp_datatype_info`` (``_90``,
``_100``), registered in :data:`.procedures.PROCEDURES`.

Drivers call them to implement the ODBC / JDBC catalog functions (``SQLTables``, ``SQLColumns``,
``DatabaseMetaData.getTables`` / ``getColumns`` / ``getPrimaryKeys`` / ``getIndexInfo`` /
``getTypeInfo``) and read their results by position, so the columns are those SQL Server
documents, in its order and with its types:
https://learn.microsoft.com/sql/relational-databases/system-stored-procedures/sp-tables-transact-sql
(and ``sp-columns-``, ``sp-pkeys-``, ``sp-fkeys-``, ``sp-statistics-``, ``sp-datatype-info-``);
``sp_columns_100`` adds the ``SS_*`` columns mssql-jdbc declares for it
(``SS_IS_SPARSE`` ... ``SS_XML_SCHEMACOLLECTION_NAME``) before ``SS_DATA_TYPE``. The per-type
values (ODBC type codes, COLUMN_SIZE, BUFFER_LENGTH) follow SQL Server's, the date/time ones as in
https://learn.microsoft.com/sql/relational-databases/native-client-odbc-date-time/metadata-catalog.

Names are matched as SQL Server matches them: case-insensitive, ``%`` / ``_`` / ``[...]``
wildcards where the procedure takes a pattern. A qualifier other than the served database is
error 15250. The emulator has no foreign keys (``sp_fkeys`` is always empty); ``COLUMN_DEF`` is a
column's DEFAULT as ``sys.default_constraints`` has it. Differences are listed in CONTRACT.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..catalog.catalog import Catalog, EmulatedTable, system_table
from ..catalog.constraint_views import table_constraints, table_indexes
from ..catalog.storage import quote
from ..catalog.system_objects import SYSTEM_OBJECTS
from ..translate.plan import Result, StatementContext
from ..values import types as T
from .procedures import MISSING, PROCEDURES, Procedure

SYSNAME = T.SYSNAME
SMALLINT = T.SMALLINT
INT = T.INT


def _arg(args: dict[str, Any], key: str, default: Any = None) -> Any:
    value = args.get(key, MISSING)
    return default if value is MISSING else value


# -- name matching --------------------------------------------------------------------------------


def like(pattern: str | None, *, use_pattern: bool = True) -> Callable[[str], bool]:
    """A matcher for a T-SQL LIKE pattern (case-insensitive); None matches everything."""
    if pattern is None:
        return lambda _name: True
    if not use_pattern:
        lowered = pattern.lower()
        return lambda name: name.lower() == lowered
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        elif c == "[":
            close = pattern.find("]", i + 2)
            if close < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : close]
                negate = body.startswith("^")
                body = body[1:] if negate else body
                out.append(f"[{'^' if negate else ''}{re.escape(body)}]")
                i = close
        else:
            out.append(re.escape(c))
        i += 1
    compiled = re.compile("".join(out), re.IGNORECASE | re.DOTALL)
    return lambda name: compiled.fullmatch(name) is not None


def _check_qualifier(session: StatementContext, qualifier: Any) -> None:
    if qualifier is not None and str(qualifier).lower() != session.db_name.lower():
        raise errors.server_error(
            15250,
            "The database name component of the object qualifier must be the name of the "
            "current database.",
        )


@dataclass(frozen=True)
class _Object:
    table: EmulatedTable
    table_type: str  # TABLE, VIEW, SYSTEM TABLE


def _objects(cat: Catalog) -> list[_Object]:
    """Every table and view the database shows: user and change tables (TABLE), the CDC
    metadata tables (TABLE, as in SQL Server), the sys and INFORMATION_SCHEMA views (VIEW)."""
    found = [_Object(t, "TABLE") for t in cat.tables.values()]
    for obj in SYSTEM_OBJECTS:
        if obj.catalog is not None or (obj.requires_cdc and not cat.cdc_enabled):
            continue
        kind = "TABLE" if obj.schema.lower() == "cdc" else "VIEW"
        found.append(_Object(system_table(obj), kind))
    return found


# -- sp_tables ------------------------------------------------------------------------------------

_TABLE_TYPES = ("TABLE", "VIEW", "SYSTEM TABLE")


def _table_types(text: Any) -> set[str] | None:
    """``@table_type``: a list of quoted names, ``'TABLE','VIEW'`` (None: every type)."""
    if text is None:
        return None
    names = {n.strip().strip("'\"").upper() for n in str(text).split(",")}
    return {n for n in names if n}


def _sp_tables(session: StatementContext, args: dict[str, Any]) -> Result:
    _check_qualifier(session, _arg(args, "table_qualifier"))
    use_pattern = bool(_arg(args, "fusepattern", 1))
    name_ok = like(_arg(args, "table_name"), use_pattern=use_pattern)
    owner_ok = like(_arg(args, "table_owner"), use_pattern=use_pattern)
    types = _table_types(_arg(args, "table_type"))
    rows = [
        (session.db_name, o.table.schema, o.table.name, o.table_type, None)
        for o in _objects(session.refresh_catalog())
        if name_ok(o.table.name)
        and owner_ok(o.table.schema)
        and (types is None or o.table_type in types)
    ]
    rows.sort(key=lambda r: (r[3], r[1].lower(), r[2].lower()))
    columns = [
        ("TABLE_QUALIFIER", SYSNAME),
        ("TABLE_OWNER", SYSNAME),
        ("TABLE_NAME", SYSNAME),
        ("TABLE_TYPE", T.varchar(32)),
        ("REMARKS", T.varchar(254)),
    ]
    return Result.of(columns, rows)


# -- sp_columns -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OdbcType:
    """How SQLColumns describes a type: ODBC code, COLUMN_SIZE, BUFFER_LENGTH, DECIMAL_DIGITS,
    NUM_PREC_RADIX, SQL_DATA_TYPE, SQL_DATETIME_SUB, CHAR_OCTET_LENGTH, SS_DATA_TYPE."""

    data_type: int
    size: int | None
    length: int | None
    scale: int | None
    radix: int | None
    sql_data_type: int
    datetime_sub: int | None
    octets: int | None
    ss_data_type: int


_FIXED: dict[str, tuple[int, int, int, int | None, int | None, int, int]] = {
    # name: data_type, size, length, scale, radix, ss type NOT NULL, ss type NULL
    "bit": (-7, 1, 1, None, None, 50, 104),
    "tinyint": (-6, 3, 1, 0, 10, 48, 38),
    "smallint": (5, 5, 2, 0, 10, 52, 38),
    "int": (4, 10, 4, 0, 10, 56, 38),
    "bigint": (-5, 19, 8, 0, 10, 127, 108),
    "money": (3, 19, 21, 4, 10, 60, 110),
    "smallmoney": (3, 10, 12, 4, 10, 122, 110),
    "float": (6, 15, 8, None, 10, 62, 109),
    "real": (7, 7, 4, None, 10, 59, 109),
    "uniqueidentifier": (-11, 36, 16, None, None, 0, 0),
}
_STRINGS: dict[str, tuple[int, int, int]] = {
    # name: data_type, bytes per character, ss type
    "char": (1, 1, 47),
    "varchar": (12, 1, 39),
    "nchar": (-8, 2, 47),
    "nvarchar": (-9, 2, 39),
    "binary": (-2, 1, 45),
    "varbinary": (-3, 1, 37),
}


def odbc_type(t: T.SqlType, nullable: bool, odbc_version: int = 3) -> OdbcType:
    """SQLColumns' description of a column of type ``t``."""
    name = t.name
    if name in _FIXED:
        code, size, length, scale, radix, ss_fixed, ss_null = _FIXED[name]
        ss = ss_null if nullable else ss_fixed
        return OdbcType(code, size, length, scale, radix, code, None, None, ss)
    if name in ("decimal", "numeric"):
        precision, scale = t.precision or 18, t.scale or 0
        code = 3 if name == "decimal" else 2
        ss = (106 if name == "decimal" else 108) if nullable else (55 if name == "decimal" else 63)
        return OdbcType(code, precision, precision + 2, scale, 10, code, None, None, ss)
    if name in _STRINGS:
        code, width, ss = _STRINGS[name]
        if t.length == -1:  # (max): 0, which drivers show as 2147483647
            return OdbcType(code, 0, 0, None, None, code, None, 0, ss)
        n = t.length or 1
        return OdbcType(code, n, n * width, None, None, code, None, n * width, ss)
    if name == "text":
        return OdbcType(-1, 2147483647, 2147483647, None, None, -1, None, 2147483647, 35)
    if name == "ntext":
        return OdbcType(-10, 1073741823, 2147483646, None, None, -10, None, 2147483646, 35)
    if name == "image":
        return OdbcType(-4, 2147483647, 2147483647, None, None, -4, None, 2147483647, 34)
    if name == "xml":
        return OdbcType(-152, 0, 0, None, None, -152, None, 0, 0)
    date_code, timestamp_code = (91, 93) if odbc_version >= 3 else (9, 11)
    scale = t.scale if t.scale is not None else 7
    if name == "date":
        return OdbcType(date_code, 10, 6, 0, None, 9, 1, None, 0)
    if name == "time":
        return OdbcType(-154, 8 if scale == 0 else 9 + scale, 10, scale, None, -154, None, None, 0)
    if name == "datetime2":
        size = 19 if scale == 0 else 20 + scale
        return OdbcType(timestamp_code, size, 16, scale, None, 9, 3, None, 0)
    if name == "datetime":
        return OdbcType(timestamp_code, 23, 16, 3, None, 9, 3, None, 61 if not nullable else 111)
    if name == "smalldatetime":
        return OdbcType(timestamp_code, 16, 16, 0, None, 9, 3, None, 58 if not nullable else 111)
    if name == "datetimeoffset":
        size = 26 if scale == 0 else 27 + scale
        return OdbcType(-155, size, 20, scale, None, -155, None, None, 0)
    raise errors.not_supported(f"the catalog description of {t.sql} columns")


_COLUMNS_BASE: list[tuple[str, T.SqlType]] = [
    ("TABLE_QUALIFIER", SYSNAME),
    ("TABLE_OWNER", SYSNAME),
    ("TABLE_NAME", SYSNAME),
    ("COLUMN_NAME", SYSNAME),
    ("DATA_TYPE", SMALLINT),
    ("TYPE_NAME", SYSNAME),
    ("PRECISION", INT),
    ("LENGTH", INT),
    ("SCALE", SMALLINT),
    ("RADIX", SMALLINT),
    ("NULLABLE", SMALLINT),
    ("REMARKS", T.varchar(254)),
    ("COLUMN_DEF", T.nvarchar(4000)),
    ("SQL_DATA_TYPE", SMALLINT),
    ("SQL_DATETIME_SUB", SMALLINT),
    ("CHAR_OCTET_LENGTH", INT),
    ("ORDINAL_POSITION", INT),
    ("IS_NULLABLE", T.varchar(254)),
]
_COLUMNS_100_EXTRA: list[tuple[str, T.SqlType]] = [
    ("SS_IS_SPARSE", SMALLINT),
    ("SS_IS_COLUMN_SET", SMALLINT),
    ("SS_IS_COMPUTED", SMALLINT),
    ("SS_IS_IDENTITY", SMALLINT),
    ("SS_UDT_CATALOG_NAME", T.nvarchar(128)),
    ("SS_UDT_SCHEMA_NAME", T.nvarchar(128)),
    ("SS_UDT_ASSEMBLY_TYPE_NAME", T.nvarchar(-1)),
    ("SS_XML_SCHEMACOLLECTION_CATALOG_NAME", T.nvarchar(128)),
    ("SS_XML_SCHEMACOLLECTION_SCHEMA_NAME", T.nvarchar(128)),
    ("SS_XML_SCHEMACOLLECTION_NAME", T.nvarchar(128)),
]
SP_COLUMNS_COLUMNS = [*_COLUMNS_BASE, ("SS_DATA_TYPE", T.TINYINT)]
SP_COLUMNS_100_COLUMNS = [*_COLUMNS_BASE, *_COLUMNS_100_EXTRA, ("SS_DATA_TYPE", T.TINYINT)]


def _tables_named(
    session: StatementContext, args: dict[str, Any], *, use_pattern: bool = True
) -> list[EmulatedTable]:
    """The tables and views ``@table_name`` / ``@table_owner`` name (owner NULL: dbo)."""
    _check_qualifier(session, _arg(args, "table_qualifier"))
    name_ok = like(_arg(args, "table_name"), use_pattern=use_pattern)
    owner_ok = like(_arg(args, "table_owner") or "dbo", use_pattern=use_pattern)
    found = [
        o.table
        for o in _objects(session.refresh_catalog())
        if name_ok(o.table.name) and owner_ok(o.table.schema)
    ]
    return sorted(found, key=lambda t: (t.schema.lower(), t.name.lower()))


def _column_defaults(session: StatementContext, table: EmulatedTable) -> dict[str, str]:
    """COLUMN_DEF: each column's DEFAULT as sys.default_constraints defines it (``((0))``)."""
    if table.kind != "user" or table.object_id is None:
        return {}
    return {
        c.column.lower(): str(c.definition)
        for c in table_constraints(session.db, table.object_id)
        if c.type == "D" and c.column is not None
    }


def _columns(session: StatementContext, args: dict[str, Any], *, extended: bool) -> Result:
    use_pattern = bool(_arg(args, "fusepattern", 1))
    odbc_version = int(_arg(args, "odbcver", 2) or 2)
    column_ok = like(_arg(args, "column_name"), use_pattern=use_pattern)
    rows = []
    for table in _tables_named(session, args, use_pattern=use_pattern):
        defaults = _column_defaults(session, table)
        for column in table.columns:
            if not column_ok(column.name):
                continue
            d = odbc_type(column.type, column.nullable, odbc_version)
            row: list[Any] = [
                session.db_name, table.schema, table.name, column.name, d.data_type,
                column.type.name, d.size, d.length, d.scale, d.radix, int(column.nullable),
                None, defaults.get(column.name.lower()), d.sql_data_type, d.datetime_sub,
                d.octets, column.column_id,
                "YES" if column.nullable else "NO",
            ]  # fmt: skip
            if extended:
                row += [0, 0, 0, int(column.identity), None, None, None, None, None, None]
            row.append(d.ss_data_type)
            rows.append(tuple(row))
    return Result.of(SP_COLUMNS_100_COLUMNS if extended else SP_COLUMNS_COLUMNS, rows)


# -- sp_pkeys / sp_fkeys --------------------------------------------------------------------------


def _sp_pkeys(session: StatementContext, args: dict[str, Any]) -> Result:
    if _arg(args, "table_name") is None:
        raise errors.server_error(
            201,
            "Procedure or function 'sp_pkeys' expects parameter '@table_name', which was not "
            "supplied.",
        )
    rows = []
    for table in _tables_named(session, args, use_pattern=False):
        for seq, key in enumerate(table.key, start=1):
            column = table.column(key)
            rows.append(
                (
                    session.db_name,
                    table.schema,
                    table.name,
                    column.name if column else key,
                    seq,
                    table.pk_name,
                )
            )
    columns = [
        ("TABLE_QUALIFIER", SYSNAME),
        ("TABLE_OWNER", SYSNAME),
        ("TABLE_NAME", SYSNAME),
        ("COLUMN_NAME", SYSNAME),
        ("KEY_SEQ", SMALLINT),
        ("PK_NAME", SYSNAME),
    ]
    return Result.of(columns, rows)


def _sp_fkeys(session: StatementContext, args: dict[str, Any]) -> Result:
    if _arg(args, "pktable_name") is None and _arg(args, "fktable_name") is None:
        raise errors.server_error(15009, "sp_fkeys needs @pktable_name or @fktable_name (or both).")
    _check_qualifier(session, _arg(args, "pktable_qualifier"))
    _check_qualifier(session, _arg(args, "fktable_qualifier"))
    columns = [
        ("PKTABLE_QUALIFIER", SYSNAME),
        ("PKTABLE_OWNER", SYSNAME),
        ("PKTABLE_NAME", SYSNAME),
        ("PKCOLUMN_NAME", SYSNAME),
        ("FKTABLE_QUALIFIER", SYSNAME),
        ("FKTABLE_OWNER", SYSNAME),
        ("FKTABLE_NAME", SYSNAME),
        ("FKCOLUMN_NAME", SYSNAME),
        ("KEY_SEQ", SMALLINT),
        ("UPDATE_RULE", SMALLINT),
        ("DELETE_RULE", SMALLINT),
        ("FK_NAME", SYSNAME),
        ("PK_NAME", SYSNAME),
        ("DEFERRABILITY", SMALLINT),
    ]
    return Result.of(columns, [])  # the emulator has no foreign keys


# -- sp_statistics --------------------------------------------------------------------------------

SQL_TABLE_STAT, SQL_INDEX_CLUSTERED, SQL_INDEX_OTHER = 0, 1, 3


def _statistics(session: StatementContext, args: dict[str, Any]) -> Result:
    index_ok = like(_arg(args, "index_name", "%") or "%")
    unique_only = str(_arg(args, "is_unique", "N") or "N").upper() == "Y"
    rows = []
    for table in _tables_named(session, args, use_pattern=False):
        if table.kind not in ("user", "change"):
            continue
        (count,) = session.db.execute(f"SELECT COUNT(*) FROM {quote(table.physical)}").fetchone()
        pages = (int(count) + 99) // 100  # SQLite keeps no pages per table: an estimate
        head = (session.db_name, table.schema, table.name)
        rows.append((*head, None, None, None, SQL_TABLE_STAT, None, None, None, count, pages, None))
        indexes = table_indexes(session.db, table.object_id) if table.object_id else []
        for index in indexes:
            if not index_ok(index.name) or (unique_only and not index.is_unique):
                continue
            kind = SQL_INDEX_CLUSTERED if index.clustered else SQL_INDEX_OTHER
            for seq, (column, descending) in enumerate(index.keys, start=1):
                rows.append(
                    (*head, int(not index.is_unique), table.name, index.name, kind, seq, column,
                     "D" if descending else "A", count if index.is_unique else None,
                     pages if index.clustered else None, None)
                )  # fmt: skip
    rows.sort(key=lambda r: (r[3] is not None, r[3] or 0, r[6], str(r[5] or "").lower(), r[7] or 0))
    columns = [
        ("TABLE_QUALIFIER", SYSNAME),
        ("TABLE_OWNER", SYSNAME),
        ("TABLE_NAME", SYSNAME),
        ("NON_UNIQUE", SMALLINT),
        ("INDEX_QUALIFIER", SYSNAME),
        ("INDEX_NAME", SYSNAME),
        ("TYPE", SMALLINT),
        ("SEQ_IN_INDEX", SMALLINT),
        ("COLUMN_NAME", SYSNAME),
        ("COLLATION", T.SqlType("char", length=1)),
        ("CARDINALITY", INT),
        ("PAGES", INT),
        ("FILTER_CONDITION", T.varchar(128)),
    ]
    return Result.of(columns, rows)


# -- sp_datatype_info -----------------------------------------------------------------------------

DATATYPE_INFO_COLUMNS: list[tuple[str, T.SqlType]] = [
    ("TYPE_NAME", SYSNAME),
    ("DATA_TYPE", SMALLINT),
    ("PRECISION", INT),
    ("LITERAL_PREFIX", T.varchar(32)),
    ("LITERAL_SUFFIX", T.varchar(32)),
    ("CREATE_PARAMS", T.varchar(32)),
    ("NULLABLE", SMALLINT),
    ("CASE_SENSITIVE", SMALLINT),
    ("SEARCHABLE", SMALLINT),
    ("UNSIGNED_ATTRIBUTE", SMALLINT),
    ("MONEY", SMALLINT),
    ("AUTO_INCREMENT", SMALLINT),
    ("LOCAL_TYPE_NAME", SYSNAME),
    ("MINIMUM_SCALE", SMALLINT),
    ("MAXIMUM_SCALE", SMALLINT),
    ("SQL_DATA_TYPE", SMALLINT),
    ("SQL_DATETIME_SUB", SMALLINT),
    ("NUM_PREC_RADIX", INT),
    ("INTERVAL_PRECISION", SMALLINT),
    ("USERTYPE", SMALLINT),
]


def _type(
    name: str, code: int, precision: int, prefix: Any, suffix: Any, params: Any, **extra: Any
) -> tuple[Any, ...]:
    return (
        name, code, precision, prefix, suffix, params, 1, extra.get("case", 0),
        extra.get("searchable", 2), extra.get("unsigned"), extra.get("money", 0), extra.get("auto"),
        name, extra.get("min_scale"), extra.get("max_scale"), extra.get("sql_type", code),
        extra.get("sub"), extra.get("radix"), None, 0,
    )  # fmt: skip


_NUMBER = {"unsigned": 0, "auto": 0, "radix": 10}
_DECIMAL = {**_NUMBER, "min_scale": 0, "max_scale": 38}
DATATYPE_INFO_ROWS: list[tuple[Any, ...]] = [
    _type("bit", -7, 1, None, None, None, unsigned=0, searchable=2),
    _type("tinyint", -6, 3, None, None, None, unsigned=1, auto=0, radix=10),
    _type("bigint", -5, 19, None, None, None, **_NUMBER),
    _type("varbinary", -3, 8000, "0x", None, "max length"),
    _type("binary", -2, 8000, "0x", None, "length"),
    _type("nvarchar", -9, 4000, "N'", "'", "max length", case=0, searchable=3),
    _type("nchar", -8, 4000, "N'", "'", "length", case=0, searchable=3),
    _type("uniqueidentifier", -11, 36, "'", "'", None),
    _type("char", 1, 8000, "'", "'", "length", searchable=3),
    _type("numeric", 2, 38, None, None, "precision,scale", **_DECIMAL),
    _type("decimal", 3, 38, None, None, "precision,scale", **_DECIMAL),
    _type("money", 3, 19, "$", None, None, **_NUMBER, money=1, min_scale=4, max_scale=4),
    _type("int", 4, 10, None, None, None, **_NUMBER),
    _type("smallint", 5, 5, None, None, None, **_NUMBER),
    _type("float", 6, 53, None, None, None, unsigned=0, radix=2),
    _type("real", 7, 24, None, None, None, unsigned=0, radix=2),
    _type("varchar", 12, 8000, "'", "'", "max length", searchable=3),
    _type("date", 91, 10, "'", "'", None, sql_type=9, sub=1),
    _type("time", 92, 16, "'", "'", "scale", min_scale=0, max_scale=7, sql_type=9, sub=2),
    _type("datetime2", 93, 27, "'", "'", "scale", min_scale=0, max_scale=7, sql_type=9, sub=3),
    _type("datetime", 93, 23, "'", "'", None, min_scale=3, max_scale=3, sql_type=9, sub=3),
    _type("smalldatetime", 93, 16, "'", "'", None, min_scale=0, max_scale=0, sql_type=9, sub=3),
    _type("datetimeoffset", -155, 34, "'", "'", "scale", min_scale=0, max_scale=7),
]


def datatype_info(code: int = 0) -> Result:
    """``sp_datatype_info_100 @data_type = code`` (0: every type)."""
    return Result.of(DATATYPE_INFO_COLUMNS, [r for r in DATATYPE_INFO_ROWS if code in (0, r[1])])


def _sp_datatype_info(session: StatementContext, args: dict[str, Any]) -> Result:
    return datatype_info(int(_arg(args, "data_type", 0) or 0))


# -- registration ---------------------------------------------------------------------------------

_TABLE = ("table_name", "table_owner", "table_qualifier")
_STATISTICS = (*_TABLE, "index_name", "is_unique", "accuracy")
CATALOG_PROCEDURES = (
    Procedure("sp_tables", (*_TABLE, "table_type", "fusepattern"), (), _sp_tables),
    Procedure(
        "sp_columns",
        (*_TABLE, "column_name", "odbcver"),
        ("table_name",),
        lambda s, a: _columns(s, a, extended=False),
    ),
    Procedure(
        "sp_columns_100",
        (*_TABLE, "column_name", "namescope", "odbcver", "fusepattern"),
        ("table_name",),
        lambda s, a: _columns(s, a, extended=True),
    ),
    Procedure("sp_pkeys", _TABLE, ("table_name",), _sp_pkeys),
    Procedure(
        "sp_fkeys",
        (
            "pktable_name",
            "pktable_owner",
            "pktable_qualifier",
            "fktable_name",
            "fktable_owner",
            "fktable_qualifier",
        ),
        (),
        _sp_fkeys,
    ),
    Procedure("sp_statistics", _STATISTICS, ("table_name",), _statistics),
    Procedure("sp_statistics_100", _STATISTICS, ("table_name",), _statistics),
    Procedure("sp_datatype_info", ("data_type", "odbcver"), (), _sp_datatype_info),
    Procedure("sp_datatype_info_90", ("data_type", "odbcver"), (), _sp_datatype_info),
    Procedure("sp_datatype_info_100", ("data_type", "odbcver"), (), _sp_datatype_info),
)
PROCEDURES.update({p.name.lower(): p for p in CATALOG_PROCEDURES})
