"""Which values compare and convert how: type families, comparison encoders, literal types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from ..values.types import SqlType
from ..values.untyped_values import adapt_untyped


@dataclass(frozen=True)
class Want:
    """The type an expression is expected to have and why (assignment or comparison)."""

    type: SqlType
    assign: bool = False


def family(t: SqlType | None) -> str | None:
    """Types whose stored forms compare correctly with each other share a family."""
    if t is None:
        return None
    if t.is_numeric:
        return "num"
    if t.is_sort_decimal:
        return f"dec{t.precision}_{t.scale}"
    if t.name == "date":
        return "date"
    if t.name == "time":
        return "time"
    if t.name in ("datetime", "datetime2", "smalldatetime"):
        return "datetime"
    if t.name == "datetimeoffset":
        return "dto"
    if t.is_binary:
        return "bin"
    return "str"


def compare_encoder(t: SqlType) -> Callable[[Any], Any] | None:
    """Encoder for a value compared with a column of type ``t`` (lenient: no length errors)."""
    if t.is_numeric:
        return None
    if t.name in ("char", "nchar") and t.length and t.length > 0:
        width = t.length

        def pad(value: Any) -> Any:
            if isinstance(value, str) and len(value) < width:
                return value.ljust(width)
            return adapt_untyped(value)

        return pad
    if t.name == "binary" and t.length and t.length > 0:
        size = t.length

        def pad_bytes(value: Any) -> Any:
            if isinstance(value, (bytes, bytearray, memoryview)) and len(value) < size:
                return bytes(value) + bytes(size - len(value))
            return adapt_untyped(value)

        return pad_bytes
    if t.is_string or t.is_binary:
        return None
    return t.encoder


def literal_node(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Literal.number(int(value))
    if isinstance(value, (int, float)):
        return exp.Literal.number(repr(value) if isinstance(value, float) else value)
    if isinstance(value, Decimal):
        return exp.Literal.number(str(value))
    if isinstance(value, bytes):
        return exp.HexString(this=value.hex().upper())
    return exp.Literal.string(str(value))


def decimal_literal_type(text: str) -> SqlType:
    digits = text.lstrip("-").replace(".", "").lstrip("0") or "0"
    scale = len(text.split(".")[1]) if "." in text else 0
    precision = max(len(digits), scale, 1)
    return SqlType("numeric", precision=min(precision, 38), scale=min(scale, 38))
