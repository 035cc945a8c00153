"""SQL Server values in their SQLite storage forms (see the table in :mod:`.types`): Python to
stored for the types whose encoding needs none of a column type's parameters (bit, float, real,
uniqueidentifier, date and the datetimes, text; the date/time text the others share), stored to
Python (the ``EMU_*`` converters registered with :mod:`sqlite3`).
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
import struct
import uuid
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from .. import errors

DECIMAL_CONTEXT = Context(prec=80, rounding=ROUND_HALF_UP)

# -- converters (stored value bytes -> Python) ---------------------------------------------------

_UTC = dt.UTC


@lru_cache(maxsize=256)
def _tz(offset: str) -> dt.timezone:
    sign = -1 if offset[0] == "-" else 1
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    delta = dt.timedelta(hours=hours, minutes=minutes) * sign
    return _UTC if not delta else dt.timezone(delta)


def _convert_bit(b: bytes) -> bool:
    return b != b"0"


def _convert_date(b: bytes) -> dt.date:
    return dt.date.fromisoformat(b.decode())


def _convert_time(b: bytes) -> dt.time:
    return dt.time.fromisoformat(b[:15].decode())


def _convert_datetime(b: bytes) -> dt.datetime:
    return dt.datetime.fromisoformat(b[:26].decode())


def _convert_dto(b: bytes) -> dt.datetime:
    text = b.decode()
    utc = dt.datetime.fromisoformat(text[:26])
    tz = _tz(text[28:34])
    return (utc + tz.utcoffset(None)).replace(tzinfo=tz)  # type: ignore[operator]


def _real_decimal_converter(scale: int) -> Callable[[bytes], Decimal]:
    quantum = Decimal(1).scaleb(-scale)
    quantize = DECIMAL_CONTEXT.quantize  # the bound method is faster than context=...

    def convert(b: bytes, decimal: type[Decimal] = Decimal) -> Decimal:
        return quantize(decimal(b.decode()), quantum)

    return convert


def _sort_decimal_converter(precision: int, scale: int) -> Callable[[bytes], Decimal]:
    complement = 10**precision - 1

    scaleb = DECIMAL_CONTEXT.scaleb

    def convert(b: bytes) -> Decimal:
        digits = int(b[1:])
        unscaled = digits if b[:1] == b"P" else -(complement - digits)
        return scaleb(Decimal(unscaled), -scale)

    return convert


_REGISTERED: set[str] = set()


def register_converters() -> None:
    """Register the emulator's converters with :mod:`sqlite3` (idempotent, process-wide).

    The names all start with ``EMU_`` so they never touch other users of :mod:`sqlite3`.
    """
    if _REGISTERED:
        return
    sqlite3.register_converter("EMU_BIT", _convert_bit)
    sqlite3.register_converter("EMU_DATE", _convert_date)
    sqlite3.register_converter("EMU_TIME", _convert_time)
    sqlite3.register_converter("EMU_DT", _convert_datetime)
    sqlite3.register_converter("EMU_DTO", _convert_dto)
    for scale in range(0, 39):
        sqlite3.register_converter(f"EMU_DR{scale}", _real_decimal_converter(scale))
    for precision in range(1, 39):
        for scale in range(0, precision + 1):
            sqlite3.register_converter(
                f"EMU_DX{precision}_{scale}", _sort_decimal_converter(precision, scale)
            )
    _REGISTERED.add("done")


# -- encoders (Python -> stored) ------------------------------------------------------------------


def round_half_up(numerator: int, denominator: int) -> int:
    return (2 * numerator + denominator) // (2 * denominator)


def encode_lsn_numeric(value: int) -> str:
    """A numeric(25,0) value (e.g. an LSN's numeric form) in its stored form."""
    return sort_decimal_text(value, 25)


def sort_decimal_text(unscaled: int, precision: int) -> str:
    if unscaled >= 0:
        return "P" + str(unscaled).zfill(precision)
    return "N" + str(10**precision - 1 + unscaled).zfill(precision)


def to_decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, bool):
        return Decimal(int(value))
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, str):
        try:
            return Decimal(value.strip())
        except InvalidOperation:
            raise errors.conversion_failed(value, "numeric") from None
    raise errors.conversion_failed(value, "numeric")


def bit_encode(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "1"):
            return 1
        if text in ("false", "0"):
            return 0
        raise errors.conversion_failed(value, "bit")
    return 1 if value else 0


def float_encode(value: Any) -> Any:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise errors.conversion_failed(value, "float") from None


def real_encode(value: Any) -> Any:
    if value is None:
        return None
    try:
        return struct.unpack("f", struct.pack("f", float(value)))[0]
    except OverflowError:
        raise errors.arithmetic_overflow("real") from None
    except (TypeError, ValueError):
        raise errors.conversion_failed(value, "real") from None


def plain_string_encode(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return str(value)


def guid_encode(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    try:
        if isinstance(value, (bytes, bytearray)) and len(value) == 16:
            return str(uuid.UUID(bytes_le=bytes(value))).upper()
        return str(uuid.UUID(str(value).strip())).upper()
    except ValueError:
        raise errors.server_error(
            8169,
            "Conversion failed when converting from a character string to uniqueidentifier.",
            sqlstate="22018",
            cls=errors.DataError,
        ) from None


def as_datetime(value: Any, type_name: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    if isinstance(value, dt.time):
        return dt.datetime.combine(dt.date(1900, 1, 1), value)
    if isinstance(value, str):
        text = value.strip().replace("T", " ")
        try:
            return parse_datetime_text(text)
        except ValueError:
            raise errors.server_error(
                241,
                "Conversion failed when converting date and/or time from character string.",
                sqlstate="22007",
                cls=errors.DataError,
            ) from None
    raise errors.conversion_failed(value, type_name)


_FRACTION_RE = re.compile(r"^(.*?:\d\d)\.(\d+)(.*)$")


def parse_datetime_text(text: str) -> dt.datetime:
    match = _FRACTION_RE.match(text)
    if match:  # Python accepts up to 6 fraction digits; SQL Server text may carry 7
        head, frac, tail = match.groups()
        text = f"{head}.{(frac + '000000')[:6]}{tail}"
    return dt.datetime.fromisoformat(text)


def round_fraction(moment: dt.datetime, digits: int) -> tuple[dt.datetime, int]:
    """Round to ``digits`` fractional digits; returns the whole-second time and 1e-7 units."""
    units = moment.microsecond * 10
    step = 10 ** (7 - digits)
    units = round_half_up(units, step) * step
    base = moment.replace(microsecond=0)
    if units >= 10**7:
        try:
            base += dt.timedelta(seconds=1)
        except OverflowError:  # rounding up past 9999-12-31 23:59:59
            raise errors.server_error(
                242,
                "The conversion of a datetime2 data type to a datetime2 data type resulted in "
                "an out-of-range value.",
                sqlstate="22008",
                cls=errors.DataError,
            ) from None
        units -= 10**7
    return base, units


def format_datetime(base: dt.datetime, units: int) -> str:
    return f"{base.isoformat(sep=' ', timespec='seconds')}.{units:07d}"


def datetime_encode(value: Any) -> Any:
    """datetime: 1/300 s ticks, shown (and returned) in milliseconds ending in 0, 3 or 7."""
    if value is None:
        return None
    moment = as_datetime(value, "datetime")
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None)
    ticks = round_half_up(moment.microsecond * 300, 10**6)
    base = moment.replace(microsecond=0)
    if ticks >= 300:
        base += dt.timedelta(seconds=1)
        ticks -= 300
    millis = round_half_up(ticks * 10, 3)
    return format_datetime(base, millis * 10_000)


def smalldatetime_encode(value: Any) -> Any:
    if value is None:
        return None
    moment = as_datetime(value, "smalldatetime")
    if moment.tzinfo is not None:
        moment = moment.replace(tzinfo=None)
    base = moment.replace(second=0, microsecond=0)
    if moment.second * 1_000_000 + moment.microsecond >= 29_999_000:
        base += dt.timedelta(minutes=1)
    return format_datetime(base, 0)


def date_encode(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    return as_datetime(value, "date").date().isoformat()
