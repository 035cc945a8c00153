"""A column's SQL Server type as T-SQL writes it, from ``sys.columns``' name, length, precision
and scale: ``decimal(12,2)``, ``nvarchar(40)``, ``varbinary(max)``, ``datetime2(7)``."""

from __future__ import annotations

from typing import Any

_LENGTH_TYPES = ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar")
_SCALE_TYPES = ("datetime2", "time", "datetimeoffset")


def sql_type_text(column: Any) -> str:
    """``column`` (anything with ``type_name``, ``max_length`` in bytes, -1 for ``max``,
    ``precision`` and ``scale``) as its T-SQL type."""
    name = column.type_name
    if name in ("decimal", "numeric"):
        return f"{name}({column.precision},{column.scale})"
    if name in _LENGTH_TYPES:
        if column.max_length == -1:
            return f"{name}(max)"
        length = column.max_length // 2 if name.startswith("n") else column.max_length
        return f"{name}({length})"
    if name in _SCALE_TYPES:
        return f"{name}({column.scale})"
    return name
