"""Random values for every SQL Server type of a column, and the parameters sent for them.

:func:`generate_value` draws a value of a :class:`~.demo_schema.ColumnDef`'s type in the Python type
pyodbc returns for it (``char(n)`` padded, ``binary(n)`` zero-filled, ``Decimal`` with the
column's scale, naive datetimes with microseconds, tz-aware datetimeoffsets, upper-case GUID
strings), steered by the column's hint; :func:`to_parameter` is what a statement binds for it.
"""

from __future__ import annotations

import datetime as dt
import struct
import uuid
from decimal import Decimal
from random import Random
from typing import Any

from .demo_schema import INTEGER_RANGES, ColumnDef

__all__ = ["NULL_RATE", "generate_value", "to_parameter"]

NULL_RATE = 0.12


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ASCII_WORDS = _words(
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu order stock "
    "ship invoice refund priority express standard gift wrap fragile sample bulk"
)
_UNICODE_WORDS = _words(
    "naïve café Straße Ærø smørbrød Ångström crème brûlée façade jalapeño Zoë Łódź "
    "東京 大阪 注文 商品 Привет заказ Москва مرحبا طلب Ελλάδα παραγγελία 서울 주문 "
    "Nguyễn Việt ₹100 €5 ½ ✓ ★ ☃"
)
_SUPPLEMENTARY = ("😀", "🚚", "📦", "𝄞", "🇩🇪")
_FIRST_NAMES = _words(
    "Anna Zoë Björn José Łukasz Søren Ólafur Chloé Dmitri Aiko Fatima Ngozi Priya Mateo "
    "Jürgen Inès Siobhán Ümit Ярослав Μαρία 太郎 민준 محمد"
)
_LAST_NAMES = _words(
    "Müller Øberg García Nowak Dubois Tanaka Okafor Sharma Rossi O'Brien Ivanova Yılmaz "
    "Nguyễn Kowalski Петров Παπαδόπουλος 山田 김 علي"
)
_COUNTRIES = ("DE", "US", "FR", "JP", "BR", "IN", "SE", "ZA", "PL", "KR", "EG", "GR")
_STATUSES = ("new", "paid", "picking", "shipped", "delivered", "cancelled", "returned")
_CHANNELS = ("web", "app", "store", "phone", "partner")
_OFFSETS = (0, 60, 120, -300, -480, 330, 345, 540, -210, 600, -600, 840, -720)
_HOSTS = ("web-01", "web-02", "api-ä1", "worker-東京", "batch")


def _ascii_text(rng: Random, limit: int) -> str:
    words: list[str] = []
    size = rng.randint(1, max(1, min(limit, 60)))
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(_ASCII_WORDS))
    return " ".join(words)[:limit].rstrip()


def _unicode_text(rng: Random, limit: int, *, supplementary: bool) -> str:
    words: list[str] = []
    size = rng.randint(1, max(1, min(limit, 80)))
    while sum(len(w) + 1 for w in words) < size:
        pick = rng.random()
        if supplementary and pick < 0.05:
            words.append(rng.choice(_SUPPLEMENTARY))
        elif pick < 0.5:
            words.append(rng.choice(_UNICODE_WORDS))
        else:
            words.append(rng.choice(_ASCII_WORDS))
    return " ".join(words)[:limit].rstrip()


def _xml(rng: Random) -> str:
    kind = rng.choice(_STATUSES)
    note = _unicode_text(rng, 40, supplementary=False)
    return (
        f'<doc kind="{kind}"><id>{rng.randint(1, 10**6)}</id>'
        f"<note>{note}</note><flag>{rng.choice(('true', 'false'))}</flag></doc>"
    )


def _truncate_micro(micro: int, digits: int) -> int:
    if digits >= 6:
        return micro
    step = 10 ** (6 - digits)
    return micro // step * step


def _random_datetime(rng: Random, start_year: int, end_year: int) -> dt.datetime:
    start = dt.datetime(start_year, 1, 1)
    span = (dt.datetime(end_year, 12, 31) - start).days
    return start + dt.timedelta(
        days=rng.randint(0, span),
        seconds=rng.randint(0, 86399),
        microseconds=rng.randint(0, 10**6 - 1),
    )


def _decimal(rng: Random, precision: int, scale: int) -> Decimal:
    int_digits = precision - scale
    if rng.random() < 0.03:  # the largest value the type holds
        unscaled = 10**precision - 1
    else:
        used = rng.randint(0, min(int_digits, 9))
        unscaled = rng.randint(0, 10 ** (used + scale) - 1)
    if rng.random() < 0.2:
        unscaled = -unscaled
    return Decimal(f"{unscaled}E-{scale}")  # exact: scaleb would round to 28 digits


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def generate_value(rng: Random, column: ColumnDef, *, allow_null: bool = True) -> Any:
    """A random value for ``column`` in the form pyodbc returns it (``None`` for some NULLs)."""
    if allow_null and column.nullable and rng.random() < NULL_RATE:
        return None
    base = column.base_type
    hint = column.hint
    if base in INTEGER_RANGES:
        low, high = INTEGER_RANGES[base]
        if hint == "quantity":
            return rng.randint(1, 20)
        roll = rng.random()
        if roll < 0.03:
            return rng.choice((low, high))
        if roll < 0.6:
            return rng.randint(max(low, 0), min(high, 1000))
        return rng.randint(max(low, -(10**6)), min(high, 10**9))
    if base == "bit":
        return rng.random() < 0.5
    if base in ("decimal", "numeric"):
        return _decimal(rng, column.precision, column.scale)
    if base in ("money", "smallmoney"):
        high = 2**63 - 1 if base == "money" else 2**31 - 1
        roll = rng.random()
        if roll < 0.03:
            unscaled = rng.choice((high, -high - 1))
        else:
            unscaled = rng.randint(0, min(high, 10**9))
            unscaled = -unscaled if roll > 0.9 else unscaled
        return Decimal(f"{unscaled}E-4")
    if base == "float":
        roll = rng.random()
        if roll < 0.05:
            return rng.choice((0.0, 1e-300, -2.5e300, 1.0000000000000002))
        if roll < 0.3:
            return rng.uniform(-1.0, 1.0) * 10 ** rng.randint(-12, 15)
        return rng.uniform(-1e6, 1e6)
    if base == "real":
        return _float32(rng.uniform(-1e4, 1e4) if rng.random() < 0.9 else rng.uniform(-1, 1))
    if base in ("char", "varchar", "text"):
        return _ascii_string(rng, column)
    if base in ("nchar", "nvarchar", "ntext"):
        return _unicode_string(rng, column)
    if base in ("binary", "varbinary"):
        length = column.length
        if length is None:
            size = 9000 if rng.random() < 0.02 else rng.randint(0, 512)
        elif base == "binary":
            size = length if rng.random() < 0.8 else rng.randint(0, length)
        else:
            size = rng.randint(0, length)
        data = rng.randbytes(size)
        return data.ljust(length, b"\x00") if base == "binary" and length else data
    if base == "uniqueidentifier":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()
    if base == "xml":
        return _xml(rng)
    return _temporal(rng, column)


def _ascii_string(rng: Random, column: ColumnDef) -> str:
    base, length, hint = column.base_type, column.length, column.hint
    limit = length if length is not None else 200
    if hint == "email":
        value = f"{rng.choice(_ASCII_WORDS)}.{rng.choice(_ASCII_WORDS)}{rng.randint(1, 999)}"
        value = f"{value}@example.{rng.choice(('com', 'org', 'de', 'jp'))}"
    elif hint == "country":
        value = rng.choice(_COUNTRIES)
    elif hint == "status":
        value = rng.choice(_STATUSES)
    elif hint == "sku":
        value = f"SKU-{rng.getrandbits(32):08X}"
    elif base == "varchar" and column.name == "channel":
        value = rng.choice(_CHANNELS)
    elif length is None and rng.random() < 0.03:
        value = _ascii_text(rng, 60) * 150  # a LOB above 8000 bytes
    elif rng.random() < 0.03:
        value = ""
    else:
        value = _ascii_text(rng, limit)
    value = value[:limit]
    if base == "char" and length:
        value = value.ljust(length)
    return value


def _unicode_string(rng: Random, column: ColumnDef) -> str:
    base, length, hint = column.base_type, column.length, column.hint
    if hint == "name":
        value = f"{rng.choice(_FIRST_NAMES)} {rng.choice(_LAST_NAMES)}"
    elif column.name == "source_host":
        value = rng.choice(_HOSTS)
    elif length is None and rng.random() < 0.03:
        value = _unicode_text(rng, 80, supplementary=False) * 60  # a LOB above 4000 characters
    else:
        value = _unicode_text(rng, length or 300, supplementary=length is None)
    if length is not None:
        value = value[:length]
    if base == "nchar" and length:
        value = value.ljust(length)
    return value


def _temporal(rng: Random, column: ColumnDef) -> Any:
    base, digits = column.base_type, column.scale
    if base == "date":
        if rng.random() < 0.02:
            return rng.choice((dt.date(1, 1, 1), dt.date(9999, 12, 31)))
        return _random_datetime(rng, 1930, 2030).date()
    if base == "time":
        moment = _random_datetime(rng, 2000, 2000)
        return moment.time().replace(microsecond=_truncate_micro(moment.microsecond, digits))
    if base == "datetime2":
        if rng.random() < 0.02:
            extremes = (dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
            moment = rng.choice(extremes)
        else:
            moment = _random_datetime(rng, 1990, 2035)
        return moment.replace(microsecond=_truncate_micro(moment.microsecond, digits))
    if base == "datetime":
        moment = _random_datetime(rng, 1990, 2035)
        millis = rng.randint(0, 99) * 10 + rng.choice((0, 3, 7))  # 1/300 s ticks round-trip
        return moment.replace(microsecond=millis * 1000)
    if base == "smalldatetime":
        moment = _random_datetime(rng, 1990, 2078)
        return moment.replace(second=0, microsecond=0)
    if base == "datetimeoffset":
        moment = _random_datetime(rng, 1980, 2035)
        offset = dt.timezone(dt.timedelta(minutes=rng.choice(_OFFSETS)))
        micro = _truncate_micro(moment.microsecond, digits)
        return moment.replace(microsecond=micro, tzinfo=offset)
    raise ValueError(f"no value generator for SQL Server type {column.type!r}")


def to_parameter(column: ColumnDef, value: Any) -> Any:
    """The parameter sent for ``value``: datetimeoffset and time go as ISO text.

    pyodbc binds neither tz-aware datetimes nor fractional times faithfully, and SQL Server
    converts ``'2024-01-02 03:04:05.1234560+05:30'`` exactly; the emulator accepts the same text.
    """
    if value is None:
        return None
    base = column.base_type
    if base == "datetimeoffset":
        offset = value.utcoffset() or dt.timedelta(0)
        minutes = int(offset.total_seconds()) // 60
        sign = "-" if minutes < 0 else "+"
        hours, mins = divmod(abs(minutes), 60)
        return (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
            f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}0"
            f"{sign}{hours:02d}:{mins:02d}"
        )
    if base == "time":
        return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}0"
    return value
