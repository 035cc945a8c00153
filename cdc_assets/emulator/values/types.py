"""SQL Server data types: parsing, storage in SQLite, conversion back to pyodbc's Python types.

Every SQL Server type gets a SQLite storage form that keeps equality *and* order, so ``WHERE``,
``ORDER BY``, ``MIN``/``MAX`` and primary keys behave as in SQL Server, and that round-trips
exactly:

============================  ===========================================  =====================
SQL Server type               stored in SQLite as                          returned as
============================  ===========================================  =====================
tinyint/smallint/int/bigint   INTEGER                                      int
bit                           INTEGER 0/1                                  bool
decimal/numeric p <= 15,      REAL (a <=15-digit decimal survives a        Decimal (column scale)
smallmoney                    double exactly)
decimal/numeric p > 15,       TEXT, fixed width, sortable: ``P`` + p       Decimal (column scale)
money                         digits of the unscaled value (``N`` + nines
                              complement when negative)
float / real                  REAL (real rounded through float32)          float
char/varchar/nchar/nvarchar,  TEXT COLLATE NOCASE (SQL Server's default    str
text/ntext/xml                collation is case-insensitive); char(n)
                              padded to n
uniqueidentifier              TEXT, upper case                             str (upper case)
binary/varbinary/image        BLOB (binary(n) padded with zero bytes)      bytes
date                          TEXT ``YYYY-MM-DD``                          datetime.date
time(n)                       TEXT ``HH:MM:SS.fffffff`` (rounded to n)     datetime.time
datetime/datetime2/           TEXT ``YYYY-MM-DD HH:MM:SS.fffffff``         datetime.datetime
smalldatetime                 (rounded like SQL Server: datetime to 1/300
                              s, smalldatetime to the minute)
datetimeoffset(n)             TEXT, UTC instant then `` +HH:MM`` offset    aware datetime
============================  ===========================================  =====================

The declared SQLite type of a column starts with a converter name (``EMU_...``) for the types that
need one; :func:`.sqlite_values.register_converters` registers them with :mod:`sqlite3`, and the
emulator opens SQLite with ``PARSE_DECLTYPES | PARSE_COLNAMES``, so conversion runs inside
sqlite3's C fetch loop and the plain types (int, float, str, bytes) pay nothing.

Here: :class:`SqlType` and the encoders that need a type's parameters (length, precision, scale).
The storage forms every type shares (converters, date/time text, the encoders of types without
parameters) are in :mod:`.sqlite_values`; T-SQL type names are parsed in :mod:`.type_parsing`;
values without a column type are bound by :mod:`.untyped_values`.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

from .. import errors
from .sqlite_values import (
    DECIMAL_CONTEXT,
    as_datetime,
    bit_encode,
    date_encode,
    datetime_encode,
    float_encode,
    format_datetime,
    guid_encode,
    parse_datetime_text,
    plain_string_encode,
    real_encode,
    round_fraction,
    smalldatetime_encode,
    sort_decimal_text,
    to_decimal,
)

REAL_DECIMAL_MAX_PRECISION = 15

Encoder = Callable[[Any], Any]


# -- catalogue of SQL Server system types (sys.types) -------------------------------------------

#: name -> (system_type_id, user_type_id, max_length, precision, scale, is_nullable)
SYS_TYPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "image": (34, 34, 16, 0, 0, 1),
    "text": (35, 35, 16, 0, 0, 1),
    "uniqueidentifier": (36, 36, 16, 0, 0, 1),
    "date": (40, 40, 3, 10, 0, 1),
    "time": (41, 41, 5, 16, 7, 1),
    "datetime2": (42, 42, 8, 27, 7, 1),
    "datetimeoffset": (43, 43, 10, 34, 7, 1),
    "tinyint": (48, 48, 1, 3, 0, 1),
    "smallint": (52, 52, 2, 5, 0, 1),
    "int": (56, 56, 4, 10, 0, 1),
    "smalldatetime": (58, 58, 4, 16, 0, 1),
    "real": (59, 59, 4, 24, 0, 1),
    "money": (60, 60, 8, 19, 4, 1),
    "datetime": (61, 61, 8, 23, 3, 1),
    "float": (62, 62, 8, 53, 0, 1),
    "sql_variant": (98, 98, 8016, 0, 0, 1),
    "ntext": (99, 99, 16, 0, 0, 1),
    "bit": (104, 104, 1, 1, 0, 1),
    "decimal": (106, 106, 17, 38, 38, 1),
    "numeric": (108, 108, 17, 38, 38, 1),
    "smallmoney": (122, 122, 4, 10, 4, 1),
    "bigint": (127, 127, 8, 19, 0, 1),
    "varbinary": (165, 165, 8000, 0, 0, 1),
    "varchar": (167, 167, 8000, 0, 0, 1),
    "binary": (173, 173, 8000, 0, 0, 1),
    "char": (175, 175, 8000, 0, 0, 1),
    "timestamp": (189, 189, 8, 0, 0, 0),
    "nvarchar": (231, 231, 8000, 0, 0, 1),
    "nchar": (239, 239, 8000, 0, 0, 1),
    "xml": (241, 241, -1, 0, 0, 1),
    "sysname": (231, 256, 256, 0, 0, 0),
}

_INT_RANGES = {
    "tinyint": (0, 255),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_STRING_TYPES = {"char", "varchar", "nchar", "nvarchar", "text", "ntext", "xml", "sysname"}
_BINARY_TYPES = {"binary", "varbinary", "image"}
_DECIMAL_TYPES = {"decimal", "numeric", "money", "smallmoney"}
_DATETIME_TYPES = {"datetime", "datetime2", "smalldatetime"}


@dataclass(frozen=True, slots=True)
class SqlType:
    """A SQL Server column type: ``name`` plus length (-1 = max), precision and scale."""

    name: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    # -- text --------------------------------------------------------------------------------
    @property
    def sql(self) -> str:
        """The type as written in T-SQL, e.g. ``nvarchar(50)``, ``decimal(18,2)``."""
        if self.name in ("decimal", "numeric"):
            return f"{self.name}({self.precision},{self.scale})"
        if self.name in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
            return f"{self.name}({'max' if self.length == -1 else self.length})"
        if self.name in ("time", "datetime2", "datetimeoffset"):
            return f"{self.name}({self.scale})"
        return self.name

    def __str__(self) -> str:
        return self.sql

    # -- sys.columns metadata ----------------------------------------------------------------
    @property
    def type_ids(self) -> tuple[int, int]:
        """(system_type_id, user_type_id)."""
        row = SYS_TYPES[self.name]
        return row[0], row[1]

    @property
    def max_length(self) -> int:
        """``sys.columns.max_length`` in bytes (-1 for max types)."""
        n = self.name
        if n in ("decimal", "numeric"):
            p = self.precision or 18
            return 5 if p <= 9 else 9 if p <= 19 else 13 if p <= 28 else 17
        if n in ("char", "varchar", "binary", "varbinary"):
            return -1 if self.length == -1 else int(self.length or 1)
        if n in ("nchar", "nvarchar"):
            return -1 if self.length == -1 else 2 * int(self.length or 1)
        s = self.scale if self.scale is not None else 7
        if n == "time":
            return 3 if s <= 2 else 4 if s <= 4 else 5
        if n == "datetime2":
            return 6 if s <= 2 else 7 if s <= 4 else 8
        if n == "datetimeoffset":
            return 8 if s <= 2 else 9 if s <= 4 else 10
        return SYS_TYPES[n][2]

    @property
    def sys_precision(self) -> int:
        n = self.name
        if n in ("decimal", "numeric"):
            return int(self.precision or 18)
        s = self.scale if self.scale is not None else 7
        if n == "time":
            return 8 if s == 0 else 9 + s
        if n == "datetime2":
            return 19 if s == 0 else 20 + s
        if n == "datetimeoffset":
            return 26 if s == 0 else 27 + s
        return SYS_TYPES[n][3]

    @property
    def sys_scale(self) -> int:
        n = self.name
        if n in ("decimal", "numeric", "time", "datetime2", "datetimeoffset"):
            return int(self.scale or 0)
        return SYS_TYPES[n][4]

    # -- storage -----------------------------------------------------------------------------
    @property
    def decimal_scale(self) -> int:
        return int(self.scale or 0)

    @property
    def is_real_decimal(self) -> bool:
        """decimal stored as REAL (precision <= 15: exact through a double)."""
        return (
            self.name in _DECIMAL_TYPES and int(self.precision or 18) <= REAL_DECIMAL_MAX_PRECISION
        )

    @property
    def is_sort_decimal(self) -> bool:
        """decimal stored as fixed-width sortable text (precision > 15)."""
        return self.name in _DECIMAL_TYPES and not self.is_real_decimal

    @property
    def is_string(self) -> bool:
        return self.name in _STRING_TYPES

    @property
    def is_binary(self) -> bool:
        return self.name in _BINARY_TYPES

    @property
    def is_integer(self) -> bool:
        return self.name in _INT_RANGES

    @property
    def is_numeric(self) -> bool:
        """Stored as a SQLite number, so SQLite arithmetic on it is meaningful."""
        return self.is_integer or self.name in ("bit", "float", "real") or self.is_real_decimal

    @property
    def is_text_encoded(self) -> bool:
        """Stored as an encoded text whose arithmetic in SQLite would be meaningless."""
        return self.is_sort_decimal or self.name in (
            "date",
            "time",
            "datetimeoffset",
            *_DATETIME_TYPES,
        )

    @property
    def converter(self) -> str | None:
        """Name of the sqlite3 converter that turns stored values into pyodbc's type."""
        return _converter_name(self)

    @property
    def decltype(self) -> str:
        """The declared SQLite column type (converter name first, affinity word after)."""
        conv = self.converter
        if self.is_integer:
            return "INT"  # not "INTEGER": a single-column key must not become the rowid alias
        if self.name in ("float", "real"):
            return "REAL"
        if self.is_binary:
            return "BLOB"
        if self.is_string or self.name == "uniqueidentifier":
            return "TEXT COLLATE NOCASE"
        if self.name == "bit":
            return f"{conv} INTEGER"
        if self.is_real_decimal:
            return f"{conv} REAL"
        return f"{conv} TEXT"

    @property
    def python_type(self) -> type:
        return _python_type(self)

    @property
    def encoder(self) -> Encoder:
        """Python value (as a pyodbc caller passes it) -> stored SQLite value, validated."""
        return _encoder(self)

    def encode(self, value: Any) -> Any:
        return _encoder(self)(value)

    @property
    def nullable_default(self) -> bool:
        return True


# -- converters (stored value bytes -> Python) ---------------------------------------------------


def _converter_name(t: SqlType) -> str | None:
    n = t.name
    if n == "bit":
        return "EMU_BIT"
    if n in _DECIMAL_TYPES:
        if t.is_real_decimal:
            return f"EMU_DR{t.decimal_scale}"
        return f"EMU_DX{t.precision}_{t.decimal_scale}"
    if n == "date":
        return "EMU_DATE"
    if n == "time":
        return "EMU_TIME"
    if n in _DATETIME_TYPES:
        return "EMU_DT"
    if n == "datetimeoffset":
        return "EMU_DTO"
    return None


def convert_stored(t: SqlType, value: Any) -> Any:
    """Convert one stored SQLite value of type ``t`` in Python (for internal reads)."""
    if value is None:
        return None
    name = t.converter
    if name is None:
        return value
    raw = value if isinstance(value, bytes) else str(value).encode()
    return sqlite3.converters[name.upper()](raw)


# -- Python types ---------------------------------------------------------------------------------


def _python_type(t: SqlType) -> type:
    n = t.name
    if n in _INT_RANGES:
        return int
    if n == "bit":
        return bool
    if n in _DECIMAL_TYPES:
        return Decimal
    if n in ("float", "real"):
        return float
    if n in _BINARY_TYPES:
        return bytes
    if n == "date":
        return dt.date
    if n == "time":
        return dt.time
    if n in _DATETIME_TYPES or n == "datetimeoffset":
        return dt.datetime
    return str


# -- encoders (Python -> stored) ------------------------------------------------------------------


def _decimal_encoder(t: SqlType) -> Encoder:
    precision = int(t.precision or 18)
    scale = t.decimal_scale
    quantum = Decimal(1).scaleb(-scale)
    limit = Decimal(10) ** (precision - scale)
    type_name = t.sql
    real = t.is_real_decimal

    def encode(value: Any) -> Any:
        if value is None:
            return None
        d = to_decimal(value)
        if not d.is_finite():
            raise errors.arithmetic_overflow(type_name)
        q = d.quantize(quantum, context=DECIMAL_CONTEXT)
        if q.copy_abs() >= limit:  # abs() would round to the default 28-digit context
            raise errors.arithmetic_overflow(type_name)
        if real:
            return float(q)
        return sort_decimal_text(int(q.scaleb(scale, context=DECIMAL_CONTEXT)), precision)

    return encode


def _int_encoder(t: SqlType) -> Encoder:
    lo, hi = _INT_RANGES[t.name]
    name = t.name

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not int:
            if isinstance(value, (bool, float, Decimal)):
                value = int(value)
            elif isinstance(value, str):
                try:
                    value = int(value.strip())
                except ValueError:
                    raise errors.conversion_failed(value, name) from None
            else:
                raise errors.conversion_failed(value, name)
        if not lo <= value <= hi:
            raise errors.arithmetic_overflow(name)
        return value

    return encode


def _string_encoder(t: SqlType) -> Encoder:
    length = t.length
    pad = t.name in ("char", "nchar")

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, str):
            if isinstance(value, (bytes, bytearray, memoryview)):
                value = bytes(value).decode("utf-8", "replace")
            elif isinstance(value, uuid.UUID):
                value = str(value).upper()
            elif isinstance(value, (dt.datetime, dt.date, dt.time)):
                value = (
                    value.isoformat(sep=" ")
                    if isinstance(value, dt.datetime)
                    else value.isoformat()
                )
            else:
                value = str(value)
        if length is not None and length >= 0:
            if len(value) > length:
                if value[length:].strip(" "):
                    raise errors.truncation()
                value = value[:length]
            if pad and len(value) < length:
                value = value.ljust(length)
        return value

    return encode


def _binary_encoder(t: SqlType) -> Encoder:
    length = t.length
    pad = t.name == "binary"

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, str):
            raise errors.server_error(
                257,
                f"Implicit conversion from data type varchar to {t.name} is not allowed. "
                "Use the CONVERT function to run this query.",
            )
        data = bytes(value)
        if length is not None and length >= 0:
            if len(data) > length:
                raise errors.truncation()
            if pad and len(data) < length:
                data = data + bytes(length - len(data))
        return data

    return encode


def _datetime2_encoder(t: SqlType) -> Encoder:
    digits = 7 if t.scale is None else t.scale

    def encode(value: Any) -> Any:
        if value is None:
            return None
        moment = as_datetime(value, t.sql)
        if moment.tzinfo is not None:
            moment = moment.replace(tzinfo=None)
        base, units = round_fraction(moment, digits)
        return format_datetime(base, units)

    return encode


def _time_encoder(t: SqlType) -> Encoder:
    digits = 7 if t.scale is None else t.scale

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, dt.time):
            moment = dt.datetime.combine(dt.date(1900, 1, 1), value.replace(tzinfo=None))
        elif isinstance(value, str) and ":" in value and "-" not in value:
            try:
                moment = parse_datetime_text(f"1900-01-01 {value.strip()}")
            except ValueError:
                raise errors.conversion_failed(value, "time") from None
        else:
            moment = as_datetime(value, "time")
        base, units = round_fraction(moment.replace(tzinfo=None), digits)
        if base.date() != dt.date(1900, 1, 1):  # rounded past midnight
            base, units = base.replace(hour=23, minute=59, second=59), 10**7 - 10 ** (7 - digits)
        return f"{base.time().isoformat(timespec='seconds')}.{units:07d}"

    return encode


def _datetimeoffset_encoder(t: SqlType) -> Encoder:
    digits = 7 if t.scale is None else t.scale

    def encode(value: Any) -> Any:
        if value is None:
            return None
        moment = as_datetime(value, t.sql)
        offset = moment.utcoffset() or dt.timedelta(0)
        utc = moment.replace(tzinfo=None) - offset
        base, units = round_fraction(utc, digits)
        minutes = int(offset.total_seconds()) // 60
        sign = "-" if minutes < 0 else "+"
        hours, mins = divmod(abs(minutes), 60)
        return f"{format_datetime(base, units)} {sign}{hours:02d}:{mins:02d}"

    return encode


@lru_cache(maxsize=1024)
def _encoder(t: SqlType) -> Encoder:
    n = t.name
    if n in _INT_RANGES:
        return _int_encoder(t)
    if n == "bit":
        return bit_encode
    if n in _DECIMAL_TYPES:
        return _decimal_encoder(t)
    if n == "float":
        return float_encode
    if n == "real":
        return real_encode
    if n in ("char", "varchar", "nchar", "nvarchar"):
        return _string_encoder(t)
    if n in ("text", "ntext", "xml", "sysname"):
        return plain_string_encode
    if n in _BINARY_TYPES:
        return _binary_encoder(t)
    if n == "uniqueidentifier":
        return guid_encode
    if n == "date":
        return date_encode
    if n == "time":
        return _time_encoder(t)
    if n == "datetime2":
        return _datetime2_encoder(t)
    if n == "datetime":
        return datetime_encode
    if n == "smalldatetime":
        return smalldatetime_encode
    if n == "datetimeoffset":
        return _datetimeoffset_encoder(t)
    raise errors.not_supported(f"values of type {t.sql}")


# common types used by the system tables
INT = SqlType("int")
BIGINT = SqlType("bigint")
SMALLINT = SqlType("smallint")
TINYINT = SqlType("tinyint")
BIT = SqlType("bit")
FLOAT = SqlType("float")
LSN = SqlType("binary", length=10)
VARBINARY128 = SqlType("varbinary", length=128)
SYSNAME = SqlType("nvarchar", length=128)
DATETIME = SqlType("datetime")
NUMERIC25 = SqlType("numeric", precision=25, scale=0)


def nvarchar(n: int) -> SqlType:
    return SqlType("nvarchar", length=n)


def varchar(n: int) -> SqlType:
    return SqlType("varchar", length=n)
