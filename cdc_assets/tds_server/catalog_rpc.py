"""``sp_datatype_info_100``: the catalog procedure behind ODBC's ``SQLGetTypeInfo``.

ODBC Driver 18 calls it (as an RPC) right after login, FreeTDS as batch text; pyodbc reads the
column sizes of a few types from it. The emulator has no such procedure, so the server answers
with SQL Server's rows for the types the project uses.
https://learn.microsoft.com/en-us/sql/odbc/reference/syntax/sqlgettypeinfo-function
"""

from __future__ import annotations

from typing import Any

from .datatypes import WireColumn, column_for_type, named

_COLUMNS = [
    ("TYPE_NAME", "sysname"),
    ("DATA_TYPE", "smallint"),
    ("PRECISION", "int"),
    ("LITERAL_PREFIX", "varchar(32)"),
    ("LITERAL_SUFFIX", "varchar(32)"),
    ("CREATE_PARAMS", "varchar(32)"),
    ("NULLABLE", "smallint"),
    ("CASE_SENSITIVE", "smallint"),
    ("SEARCHABLE", "smallint"),
    ("UNSIGNED_ATTRIBUTE", "smallint"),
    ("MONEY", "smallint"),
    ("AUTO_INCREMENT", "smallint"),
    ("LOCAL_TYPE_NAME", "sysname"),
    ("MINIMUM_SCALE", "smallint"),
    ("MAXIMUM_SCALE", "smallint"),
    ("SQL_DATA_TYPE", "smallint"),
    ("SQL_DATETIME_SUB", "smallint"),
    ("NUM_PREC_RADIX", "int"),
    ("INTERVAL_PRECISION", "smallint"),
    ("USERTYPE", "smallint"),
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


_ROWS = [
    _type("bit", -7, 1, None, None, None, unsigned=0, searchable=2),
    _type("tinyint", -6, 3, None, None, None, unsigned=1, auto=0, radix=10),
    _type("bigint", -5, 19, None, None, None, unsigned=0, auto=0, radix=10),
    _type("varbinary", -3, 8000, "0x", None, "max length"),
    _type("binary", -2, 8000, "0x", None, "length"),
    _type("nvarchar", -9, 4000, "N'", "'", "max length", case=0, searchable=3),
    _type("nchar", -8, 4000, "N'", "'", "length", case=0, searchable=3),
    _type("uniqueidentifier", -11, 36, "'", "'", None),
    _type("char", 1, 8000, "'", "'", "length", searchable=3),
    _type(
        "numeric",
        2,
        38,
        None,
        None,
        "precision,scale",
        unsigned=0,
        auto=0,
        min_scale=0,
        max_scale=38,
        radix=10,
    ),
    _type(
        "decimal",
        3,
        38,
        None,
        None,
        "precision,scale",
        unsigned=0,
        auto=0,
        min_scale=0,
        max_scale=38,
        radix=10,
    ),
    _type(
        "money",
        3,
        19,
        "$",
        None,
        None,
        unsigned=0,
        money=1,
        auto=0,
        min_scale=4,
        max_scale=4,
        radix=10,
    ),
    _type("int", 4, 10, None, None, None, unsigned=0, auto=0, radix=10),
    _type("smallint", 5, 5, None, None, None, unsigned=0, auto=0, radix=10),
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


def datatype_info(code: int) -> tuple[list[WireColumn], list[tuple[Any, ...]]]:
    """Columns and rows of ``sp_datatype_info_100 @data_type = code`` (0: every type)."""
    columns = []
    for name, type_text in _COLUMNS:
        wire = column_for_type(type_text)
        assert wire is not None
        columns.append(named(wire, name))
    rows = [r for r in _ROWS if code in (0, r[1])]
    return columns, rows
