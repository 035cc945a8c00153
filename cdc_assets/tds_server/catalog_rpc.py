"""``sp_datatype_info_100``: the catalog procedure behind ODBC's ``SQLGetTypeInfo``.

ODBC Driver 18 calls it (as an RPC) right after login, FreeTDS as batch text; pyodbc reads the
column sizes of a few types from it. The server answers it itself, before the emulator, with the
emulator's rows (:mod:`cdc_assets.emulator.procedures.catalog_procedures`, where
``EXEC sp_datatype_info...`` in any other batch lands).
https://learn.microsoft.com/en-us/sql/odbc/reference/syntax/sqlgettypeinfo-function
"""

from __future__ import annotations

from typing import Any

from cdc_assets.emulator.procedures.catalog_procedures import (
    DATATYPE_INFO_COLUMNS,
    DATATYPE_INFO_ROWS,
)

from .datatypes import WireColumn, column_for_type, named


def datatype_info(code: int) -> tuple[list[WireColumn], list[tuple[Any, ...]]]:
    """Columns and rows of ``sp_datatype_info_100 @data_type = code`` (0: every type)."""
    columns = []
    for name, sql_type in DATATYPE_INFO_COLUMNS:
        wire = column_for_type(sql_type.sql)
        assert wire is not None
        columns.append(named(wire, name))
    rows = [r for r in DATATYPE_INFO_ROWS if code in (0, r[1])]
    return columns, rows
