"""T-SQL type names parsed into :class:`.types.SqlType` (``nvarchar(50)``, ``decimal(18,2)``,
``[int]``, ``double precision``...), with SQL Server's errors for a type it does not have or the
emulator does not support.
"""

from __future__ import annotations

import re
from functools import lru_cache

from .. import errors
from .types import SYS_TYPES, SqlType

_UNSUPPORTED = {
    "sql_variant": "the sql_variant data type",
    "timestamp": "rowversion/timestamp columns",
    "rowversion": "rowversion/timestamp columns",
    "geography": "the geography data type",
    "geometry": "the geometry data type",
    "hierarchyid": "the hierarchyid data type",
    "cursor": "cursor variables",
    "table": "table variables",
}
_ALIASES = {
    "integer": "int",
    "dec": "decimal",
    "double precision": "float",
    "character": "char",
    "national character varying": "nvarchar",
    "rowversion": "timestamp",
}


_TYPE_TEXT_RE = re.compile(
    r"\s*(?:\[(?P<b>[^\]]+)\]|(?P<w>[A-Za-z_][A-Za-z0-9_]*(?:\s+precision)?))"
    r"(?:\s*\(\s*(?P<args>[^)]*)\))?",
    re.IGNORECASE,
)


@lru_cache(maxsize=4096)
def parse_type_text(text: str, pos: int = 0) -> tuple[SqlType, int]:
    """Parse a T-SQL type name at ``text[pos:]``; returns the type and the end position."""
    match = _TYPE_TEXT_RE.match(text, pos)
    if not match:
        raise errors.not_supported(f"the column type at {text[pos : pos + 30]!r}")
    name = (match.group("b") or match.group("w")).strip()
    if "." in name:
        name = name.split(".")[-1].strip("[]")
    args_text = match.group("args")
    args = [a.strip() for a in args_text.split(",")] if args_text is not None else []
    return make_type(name, args), match.end()


def make_type(name: str, args: list[str] | None = None) -> SqlType:
    """Build a :class:`SqlType` from a T-SQL type name and its arguments (as text)."""
    args = args or []
    lname = re.sub(r"\s+", " ", name.strip().lower())
    lname = _ALIASES.get(lname, lname)
    if lname in _UNSUPPORTED or lname == "timestamp":
        raise errors.not_supported(_UNSUPPORTED.get(lname, f"the {lname} data type"))
    if lname not in SYS_TYPES:
        raise errors.server_error(
            2715, f"Column, parameter, or variable #1: Cannot find data type {name}."
        )

    def num(i: int, default: int) -> int:
        if len(args) <= i or args[i] == "":
            return default
        try:
            return int(args[i])
        except ValueError:
            raise errors.not_supported(f"type argument {args[i]!r} of {name}") from None

    if lname in ("decimal", "numeric"):
        p = num(0, 18)
        s = num(1, 0)
        if not (1 <= p <= 38 and 0 <= s <= p):
            raise errors.server_error(
                2750,
                f"Column or parameter #1: Specified column precision {p} is greater than the "
                "maximum precision of 38.",
            )
        return SqlType(lname, precision=p, scale=s)
    if lname == "money":
        return SqlType("money", precision=19, scale=4)
    if lname == "smallmoney":
        return SqlType("smallmoney", precision=10, scale=4)
    if lname == "float":
        n = num(0, 53)
        return SqlType("real") if n <= 24 else SqlType("float")
    if lname in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        if args and args[0].lower() == "max":
            if lname in ("char", "nchar", "binary"):
                raise errors.server_error(
                    2716,
                    "Column, parameter, or variable #1: Cannot specify a column width on data "
                    f"type {lname}.",
                )
            return SqlType(lname, length=-1)
        return SqlType(lname, length=num(0, 1))
    if lname in ("time", "datetime2", "datetimeoffset"):
        n = num(0, 7)
        if not 0 <= n <= 7:
            raise errors.server_error(1002, f"Line 1: Specified scale {n} is invalid.")
        return SqlType(lname, scale=n)
    if lname == "sysname":
        return SqlType("nvarchar", length=128)
    return SqlType(lname)
