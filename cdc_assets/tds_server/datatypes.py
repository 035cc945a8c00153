"""SQL Server data types on the wire: column descriptions (TYPE_INFO), row values, parameters.

A result column is described from the emulator's own type text (``Cursor.column_types``, e.g.
``datetime2(7)``) or, for an untyped expression, from the Python values of the first rows. Every
string type goes out as ``nvarchar`` (Unicode, so nothing is lost in a code page) and every binary
type as ``varbinary``/``binary``: the clients return ``str`` and ``bytes`` for them all, exactly
as for the source types. ``xml``, ``text``, ``ntext`` and ``(max)`` types go out as
``nvarchar(max)``/``varbinary(max)`` in PLP chunks.

[MS-TDS] 2.2.5.4 (data type definitions), 2.2.5.5 (data type formats, PLP), 2.2.5.6 (TYPE_INFO).
"""

from __future__ import annotations

import datetime as dt
import re
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
from typing import Any

# type codes
NULLTYPE = 0x1F
INT1, BIT, INT2, INT4, INT8 = 0x30, 0x32, 0x34, 0x38, 0x7F
DATETIM4, FLT4, MONEY, DATETIME, FLT8, MONEY4 = 0x3A, 0x3B, 0x3C, 0x3D, 0x3E, 0x7A
GUID, INTN, BITN, DECIMALN, NUMERICN = 0x24, 0x26, 0x68, 0x6A, 0x6C
FLTN, MONEYN, DATETIMN = 0x6D, 0x6E, 0x6F
DATEN, TIMEN, DATETIME2N, DATETIMEOFFSETN = 0x28, 0x29, 0x2A, 0x2B
CHAR, VARCHAR, BINARY, VARBINARY = 0x2F, 0x27, 0x2D, 0x25
BIGVARBIN, BIGVARCHR, BIGBINARY, BIGCHAR, NVARCHAR, NCHAR = 0xA5, 0xA7, 0xAD, 0xAF, 0xE7, 0xEF
TEXT, IMAGE, NTEXT, SSVARIANT, XML = 0x23, 0x22, 0x63, 0x62, 0xF1

# SQL_Latin1_General_CP1_CI_AS: LCID 0x0409 with IgnoreCase/IgnoreKana/IgnoreWidth, sort id 52
COLLATION = bytes([0x09, 0x04, 0xD0, 0x00, 0x34])
PLP_NULL = 0xFFFFFFFFFFFFFFFF
PLP_UNKNOWN = 0xFFFFFFFFFFFFFFFE
_PLP_CHUNK = 8000

_WIDE = Context(prec=80, rounding=ROUND_HALF_UP)  # decimal(38, s) has more digits than 28
_DAY0 = dt.date(1, 1, 1).toordinal()
_DAY1900 = dt.date(1900, 1, 1).toordinal()
_TYPE_RE = re.compile(r"^\s*([a-z_ ]+?)\s*(?:\(\s*(max|\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$", re.I)

Encoder = Callable[[Any], bytes]


class WireTypeError(ValueError):
    """A parameter the server cannot decode (unknown or malformed TYPE_INFO)."""


@dataclass(frozen=True)
class WireColumn:
    """One result column: its name, TYPE_INFO bytes and the encoder of its values (for ROW;
    a value None is never passed, NBCROW or :attr:`null` carries it)."""

    name: str
    type_info: bytes
    encode: Encoder
    null: bytes
    plp: bool = False


# -- column descriptions ------------------------------------------------------------------------


def _scaled_time(value: dt.time | dt.datetime, scale: int) -> int:
    seconds = value.hour * 3600 + value.minute * 60 + value.second
    return seconds * 10**scale + value.microsecond * 10**scale // 1_000_000


def _time_len(scale: int) -> int:
    return 3 if scale <= 2 else 4 if scale <= 4 else 5


def _intn(size: int) -> WireColumn:
    fmt = {1: "<BB", 2: "<Bh", 4: "<Bi", 8: "<Bq"}[size]
    return WireColumn("", bytes([INTN, size]), lambda v: struct.pack(fmt, size, v), b"\x00")


def _bitn() -> WireColumn:
    return WireColumn("", bytes([BITN, 1]), lambda v: b"\x01\x01" if v else b"\x01\x00", b"\x00")


def _fltn(size: int) -> WireColumn:
    fmt = "<Bf" if size == 4 else "<Bd"
    return WireColumn("", bytes([FLTN, size]), lambda v: struct.pack(fmt, size, v), b"\x00")


def _decimal_size(precision: int) -> int:
    return 5 if precision <= 9 else 9 if precision <= 19 else 13 if precision <= 28 else 17


def _decimaln(precision: int, scale: int) -> WireColumn:
    size = _decimal_size(precision)
    quantum = Decimal(1).scaleb(-scale)

    def encode(value: Any) -> bytes:
        unscaled = int(_WIDE.quantize(Decimal(value), quantum).scaleb(scale, _WIDE))
        sign = 1 if unscaled >= 0 else 0
        return bytes([size, sign]) + abs(unscaled).to_bytes(size - 1, "little")

    return WireColumn("", bytes([DECIMALN, 17, precision, scale]), encode, b"\x00")


def _moneyn(size: int) -> WireColumn:
    def encode(value: Any) -> bytes:
        units = int(_WIDE.multiply(Decimal(value), 10000).to_integral_value(ROUND_HALF_UP, _WIDE))
        if size == 4:
            return struct.pack("<Bi", 4, units)
        return struct.pack("<BiI", 8, units >> 32, units & 0xFFFFFFFF)

    return WireColumn("", bytes([MONEYN, size]), encode, b"\x00")


def _guid() -> WireColumn:
    def encode(value: Any) -> bytes:
        u = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
        return b"\x10" + u.bytes_le

    return WireColumn("", bytes([GUID, 16]), encode, b"\x00")


def _daten() -> WireColumn:
    def encode(value: dt.date) -> bytes:
        return b"\x03" + (value.toordinal() - _DAY0).to_bytes(3, "little")

    return WireColumn("", bytes([DATEN]), encode, b"\x00")


def _timen(scale: int) -> WireColumn:
    size = _time_len(scale)

    def encode(value: dt.time) -> bytes:
        return bytes([size]) + _scaled_time(value, scale).to_bytes(size, "little")

    return WireColumn("", bytes([TIMEN, scale]), encode, b"\x00")


def _datetime2n(scale: int) -> WireColumn:
    size = _time_len(scale)

    def encode(value: dt.datetime) -> bytes:
        if value.tzinfo is not None:
            value = value.replace(tzinfo=None)
        days = value.toordinal() - _DAY0
        return (
            bytes([size + 3])
            + _scaled_time(value, scale).to_bytes(size, "little")
            + days.to_bytes(3, "little")
        )

    return WireColumn("", bytes([DATETIME2N, scale]), encode, b"\x00")


def _datetimeoffsetn(scale: int) -> WireColumn:
    size = _time_len(scale)

    def encode(value: dt.datetime) -> bytes:
        offset = value.utcoffset() or dt.timedelta(0)
        utc = value.replace(tzinfo=None) - offset
        minutes = int(offset.total_seconds() // 60)
        return (
            bytes([size + 5])
            + _scaled_time(utc, scale).to_bytes(size, "little")
            + (utc.toordinal() - _DAY0).to_bytes(3, "little")
            + struct.pack("<h", minutes)
        )

    return WireColumn("", bytes([DATETIMEOFFSETN, scale]), encode, b"\x00")


def _datetimn(size: int) -> WireColumn:
    def encode(value: dt.datetime) -> bytes:
        value = value.replace(tzinfo=None) if isinstance(value, dt.datetime) else value
        days = value.toordinal() - _DAY1900
        if size == 4:
            minutes = value.hour * 60 + value.minute
            return struct.pack("<BHH", 4, days, minutes)
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        ticks = ((micros + value.microsecond) * 3 + 5000) // 10000
        return struct.pack("<BiI", 8, days, ticks)

    return WireColumn("", bytes([DATETIMN, size]), encode, b"\x00")


def _nvarchar(length: int | None) -> WireColumn:
    """``nvarchar(length)`` (characters), or ``nvarchar(max)`` when None or above 4000."""
    if length is None or length > 4000:
        return WireColumn(
            "",
            bytes([NVARCHAR]) + b"\xff\xff" + COLLATION,
            lambda v: _plp(str(v).encode("utf-16-le")),
            struct.pack("<Q", PLP_NULL),
            plp=True,
        )

    def encode(value: Any) -> bytes:
        data = str(value).encode("utf-16-le")
        return struct.pack("<H", len(data)) + data

    return WireColumn(
        "",
        bytes([NVARCHAR]) + struct.pack("<H", 2 * max(length, 1)) + COLLATION,
        encode,
        b"\xff\xff",
    )


def _varbinary(length: int | None, *, fixed: bool = False) -> WireColumn:
    if length is None or length > 8000:
        return WireColumn(
            "",
            bytes([BIGVARBIN]) + b"\xff\xff",
            lambda v: _plp(bytes(v)),
            struct.pack("<Q", PLP_NULL),
            plp=True,
        )

    def encode(value: Any) -> bytes:
        data = bytes(value)
        return struct.pack("<H", len(data)) + data

    code = BIGBINARY if fixed else BIGVARBIN
    return WireColumn("", bytes([code]) + struct.pack("<H", max(length, 1)), encode, b"\xff\xff")


def _plp(data: bytes) -> bytes:
    parts = [struct.pack("<Q", len(data))]
    for start in range(0, len(data), _PLP_CHUNK):
        chunk = data[start : start + _PLP_CHUNK]
        parts.append(struct.pack("<I", len(chunk)))
        parts.append(chunk)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def column_for_type(type_text: str) -> WireColumn | None:
    """The wire column for a SQL Server type as written in T-SQL, or None if unknown."""
    match = _TYPE_RE.match(type_text)
    if match is None:
        return None
    name = match.group(1).lower()
    arg = match.group(2)
    length = None if arg is None or arg.lower() == "max" else int(arg)
    second = None if match.group(3) is None else int(match.group(3))
    scale = 7 if length is None else length
    simple: dict[str, Callable[[], WireColumn]] = {
        "tinyint": lambda: _intn(1),
        "smallint": lambda: _intn(2),
        "int": lambda: _intn(4),
        "bigint": lambda: _intn(8),
        "bit": _bitn,
        "float": lambda: _fltn(8),
        "real": lambda: _fltn(4),
        "money": lambda: _moneyn(8),
        "smallmoney": lambda: _moneyn(4),
        "uniqueidentifier": _guid,
        "date": _daten,
        "datetime": lambda: _datetimn(8),
        "smalldatetime": lambda: _datetimn(4),
        "time": lambda: _timen(scale),
        "datetime2": lambda: _datetime2n(scale),
        "datetimeoffset": lambda: _datetimeoffsetn(scale),
        "text": lambda: _nvarchar(None),
        "ntext": lambda: _nvarchar(None),
        "xml": lambda: _nvarchar(None),
        "image": lambda: _varbinary(None),
        "sysname": lambda: _nvarchar(128),
    }
    if name in simple:
        return simple[name]()
    if name in ("decimal", "numeric"):
        return _decimaln(length or 18, second or 0)
    if name in ("char", "varchar", "nchar", "nvarchar"):
        return _nvarchar(None if arg is not None and arg.lower() == "max" else length or 1)
    if name in ("binary", "varbinary", "timestamp", "rowversion"):
        fixed = name != "varbinary"
        if name in ("timestamp", "rowversion"):
            length = 8
        elif arg is not None and arg.lower() == "max":
            length = None
        return _varbinary(length if length is not None or arg else 1, fixed=fixed)
    return None


def column_for_values(values: Sequence[Any], description: Sequence[Any]) -> WireColumn:
    """The wire column for an untyped expression: from its first non-NULL value (the emulator
    already returns pyodbc's Python types), else from the DB-API description."""
    sample = next((v for v in values if v is not None), None)
    kind = type(sample) if sample is not None else description[1]
    if kind is bool:
        return _bitn()
    if kind is int:
        fits = all(v is None or -(2**31) <= v < 2**31 for v in values)
        return _intn(4 if fits and sample is not None else 8)
    if kind is float:
        return _fltn(8)
    if kind is Decimal:
        scale = max((-int(v.as_tuple().exponent) for v in values if v is not None), default=0)
        scale = description[5] if isinstance(description[5], int) and description[5] else scale
        return _decimaln(38, min(max(scale, 0), 38))
    if kind is dt.datetime:
        if sample is not None and sample.tzinfo is not None:
            return _datetimeoffsetn(7)
        return _datetime2n(7)
    if kind is dt.date:
        return _daten()
    if kind is dt.time:
        return _timen(7)
    if kind in (bytes, bytearray):
        return _varbinary(None)
    if kind is uuid.UUID:
        return _guid()
    if sample is None and kind is not str:
        return _intn(4)
    return _nvarchar(None)


def named(column: WireColumn, name: str) -> WireColumn:
    return WireColumn(name, column.type_info, column.encode, column.null, column.plp)


# -- parameters (TYPE_INFO + value, as clients send them in RPC requests) -----------------------


class Reader:
    """A cursor over a request payload; every read checks the bounds."""

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireTypeError("the request ends in the middle of a value")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        values = struct.unpack(fmt, self.take(size))
        return values[0] if len(values) == 1 else values

    def byte(self) -> int:
        return self.take(1)[0]

    def b_varchar(self) -> str:
        return self.take(2 * self.byte()).decode("utf-16-le")

    def us_varchar(self) -> str:
        return self.take(2 * self.unpack("<H")).decode("utf-16-le")

    @property
    def at_end(self) -> bool:
        return self.pos >= len(self.data)


_FIXED = {INT1: 1, BIT: 1, INT2: 2, INT4: 4, INT8: 8, DATETIM4: 4, FLT4: 4, MONEY: 8}
_FIXED |= {DATETIME: 8, FLT8: 8, MONEY4: 4, NULLTYPE: 0}


def _int(data: bytes) -> int:
    if len(data) == 1:
        return data[0]
    return int.from_bytes(data, "little", signed=True)


def _read_plp(r: Reader) -> bytes | None:
    total = r.unpack("<Q")
    if total == PLP_NULL:
        return None
    parts = []
    while True:
        size = r.unpack("<I")
        if size == 0:
            break
        parts.append(r.take(size))
    return b"".join(parts)


def _time_value(data: bytes, scale: int) -> dt.time:
    units = int.from_bytes(data, "little")
    micros = units * 1_000_000 // 10**scale
    seconds, micro = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return dt.time(hour, minute, second, micro)


def _date_value(data: bytes) -> dt.date:
    return dt.date.fromordinal(int.from_bytes(data, "little") + _DAY0)


def _money_value(data: bytes) -> Decimal:
    if len(data) == 4:
        units = struct.unpack("<i", data)[0]
    else:
        high, low = struct.unpack("<iI", data)
        units = (high << 32) | low
    return Decimal(units).scaleb(-4)


def _datetime_value(data: bytes) -> dt.datetime:
    if len(data) == 4:
        days, minutes = struct.unpack("<HH", data)
        return dt.datetime.fromordinal(days + _DAY1900) + dt.timedelta(minutes=minutes)
    days, ticks = struct.unpack("<iI", data)
    micros = (ticks * 10000 + 1) // 3
    return dt.datetime.fromordinal(days + _DAY1900) + dt.timedelta(microseconds=micros)


def read_param_value(r: Reader) -> Any:
    """Read one TYPE_INFO and its value; the Python value a pyodbc caller would have passed."""
    code = r.byte()
    if code in _FIXED:
        data = r.take(_FIXED[code])
        return _fixed_value(code, data)
    if code in (INTN, BITN, FLTN, MONEYN, DATETIMN, GUID):
        r.byte()  # max length
        size = r.byte()
        if size == 0:
            return None
        data = r.take(size)
        if code == INTN:
            return _int(data) if size > 1 else data[0]
        if code == BITN:
            return bool(data[0])
        if code == FLTN:
            return struct.unpack("<f" if size == 4 else "<d", data)[0]
        if code == MONEYN:
            return _money_value(data)
        if code == DATETIMN:
            return _datetime_value(data)
        return str(uuid.UUID(bytes_le=data)).upper()
    if code in (DECIMALN, NUMERICN):
        r.byte()
        r.byte()  # precision
        scale = r.byte()
        size = r.byte()
        if size == 0:
            return None
        data = r.take(size)
        magnitude = int.from_bytes(data[1:], "little")
        return Decimal(magnitude if data[0] else -magnitude).scaleb(-scale)
    if code == DATEN:
        size = r.byte()
        return None if size == 0 else _date_value(r.take(size))
    if code in (TIMEN, DATETIME2N, DATETIMEOFFSETN):
        scale = r.byte()
        size = r.byte()
        if size == 0:
            return None
        data = r.take(size)
        tlen = _time_len(scale)
        if code == TIMEN:
            return _time_value(data, scale)
        moment = dt.datetime.combine(
            _date_value(data[tlen : tlen + 3]), _time_value(data[:tlen], scale)
        )
        if code == DATETIME2N:
            return moment
        offset = dt.timedelta(minutes=struct.unpack("<h", data[tlen + 3 : tlen + 5])[0])
        return (moment + offset).replace(tzinfo=dt.timezone(offset))
    if code in (BIGVARCHR, BIGCHAR, NVARCHAR, NCHAR, BIGVARBIN, BIGBINARY):
        max_length = r.unpack("<H")
        if code in (BIGVARCHR, BIGCHAR, NVARCHAR, NCHAR):
            r.take(5)  # collation
        if max_length == 0xFFFF:
            raw = _read_plp(r)
        else:
            size = r.unpack("<H")
            raw = None if size == 0xFFFF else r.take(size)
        return _text_or_bytes(code, raw)
    if code in (TEXT, NTEXT, IMAGE):
        r.unpack("<I")
        if code != IMAGE:
            r.take(5)
        size = r.unpack("<I")
        raw = None if size == 0xFFFFFFFF else r.take(size)
        return _text_or_bytes(code, raw)
    if code == XML:
        if r.byte():
            r.b_varchar()
            r.b_varchar()
            r.us_varchar()
        raw = _read_plp(r)
        return None if raw is None else raw.decode("utf-16-le")
    if code in (CHAR, VARCHAR, BINARY, VARBINARY):
        r.byte()
        size = r.byte()
        raw = None if size == 0xFF else r.take(size)
        return _text_or_bytes(code, raw)
    raise WireTypeError(f"parameter type 0x{code:02X} is not supported by the TDS server")


def _fixed_value(code: int, data: bytes) -> Any:
    if code == NULLTYPE:
        return None
    if code == BIT:
        return bool(data[0])
    if code in (INT1, INT2, INT4, INT8):
        return _int(data)
    if code == FLT4:
        return struct.unpack("<f", data)[0]
    if code == FLT8:
        return struct.unpack("<d", data)[0]
    if code in (MONEY, MONEY4):
        return _money_value(data)
    return _datetime_value(data)


def _text_or_bytes(code: int, raw: bytes | None) -> Any:
    if raw is None:
        return None
    if code in (NVARCHAR, NCHAR, NTEXT):
        return raw.decode("utf-16-le")
    if code in (BIGVARCHR, BIGCHAR, TEXT, CHAR, VARCHAR):
        return raw.decode("cp1252", errors="replace")
    return bytes(raw)


def int_param(value: int) -> bytes:
    """TYPE_INFO + value of an ``int`` (the handle of sp_prepare/sp_prepexec)."""
    return bytes([INTN, 4]) + struct.pack("<Bi", 4, value)
