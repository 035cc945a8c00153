"""Values without a column type: a parameter bound where no column gives its type
(:func:`adapt_untyped`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

from .types import SqlType

SHORT_DECIMAL_MAX = 15

_DATETIME2_7 = SqlType("datetime2", scale=7)
_TIME_7 = SqlType("time", scale=7)
_DTO_7 = SqlType("datetimeoffset", scale=7)


def adapt_untyped(value: Any) -> Any:
    """Bind a parameter whose target type is unknown (no column to take the type from)."""
    if value is None:
        return None
    kind = type(value)
    if kind in (int, float, str, bytes):
        return value
    if kind is bool:
        return int(value)
    if isinstance(value, Decimal):
        digits = len(value.as_tuple().digits)
        return float(value) if digits <= SHORT_DECIMAL_MAX else str(value)
    if isinstance(value, dt.datetime):
        return (_DTO_7 if value.tzinfo is not None else _DATETIME2_7).encode(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return _TIME_7.encode(value)
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value
