"""Key values as JSON and back, exactly: where a resumable snapshot records its last key.

A key tuple holds the Python values a DB-API driver returns for SQL Server key columns (int,
str, Decimal, bytes, date, datetime, time, bool, float, uuid as str, None). JSON has no type for
most of them, so each value is stored as ``[type, text]`` and read back as the same value of
the same type: sent back as a parameter, it compares with the table's keys as the original did.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

__all__ = ["decode_key", "encode_key"]

_ENCODE = {
    bool: "bool",  # before int: a bool is an int too
    int: "int",
    float: "float",
    str: "str",
    Decimal: "decimal",
    bytes: "bytes",
    dt.datetime: "datetime",  # before date: a datetime is a date too
    dt.date: "date",
    dt.time: "time",
}


def _encode_value(value: Any) -> list[Any]:
    if value is None:
        return ["null", None]
    if isinstance(value, bytearray | memoryview):
        value = bytes(value)
    for kind, name in _ENCODE.items():
        if not isinstance(value, kind):
            continue
        if isinstance(value, bytes):
            return [name, value.hex()]
        if isinstance(value, dt.date | dt.time):
            return [name, value.isoformat()]
        if isinstance(value, float | Decimal):
            return [name, repr(value) if isinstance(value, float) else str(value)]
        return [name, value]
    raise TypeError(f"a key value of type {type(value).__name__} cannot be recorded: {value!r}")


def encode_key(key: Sequence[Any]) -> list[list[Any]]:
    """``key`` as JSON-ready ``[type, text]`` pairs."""
    return [_encode_value(v) for v in key]


def _decode_value(pair: Sequence[Any]) -> Any:
    name, text = pair
    if name == "null":
        return None
    if name == "bool":
        return bool(text)
    if name == "int":
        return int(text)
    if name == "float":
        return float(text)
    if name == "str":
        return str(text)
    if name == "decimal":
        return Decimal(text)
    if name == "bytes":
        return bytes.fromhex(text)
    if name == "datetime":
        return dt.datetime.fromisoformat(text)
    if name == "date":
        return dt.date.fromisoformat(text)
    if name == "time":
        return dt.time.fromisoformat(text)
    raise ValueError(f"unknown key value type {name!r}")


def decode_key(encoded: Sequence[Sequence[Any]]) -> tuple[Any, ...]:
    """The key :func:`encode_key` recorded."""
    return tuple(_decode_value(pair) for pair in encoded)
