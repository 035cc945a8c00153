"""Date parts and time-zone offsets of stored date and time values, as SQL Server computes them.

SQLite functions (registered by :func:`register`) over the emulator's stored text forms
(:mod:`.types`): ``datetime``/``datetime2`` ``YYYY-MM-DD HH:MM:SS.fffffff``, ``date``
``YYYY-MM-DD``, ``time`` ``HH:MM:SS.fffffff`` and ``datetimeoffset`` (the UTC instant, then
`` +HH:MM``):

- ``TODATETIMEOFFSET(local, offset)``: the local date and time at ``offset`` (``'+05:00'`` or
  minutes);
- ``SWITCHOFFSET(dto, offset)``: the same instant at another offset;
- ``DATEPART(unit, value)``: of the value's local date and time (a ``datetimeoffset``'s at its
  own offset); ``TZOFFSET`` its offset in minutes. ``WEEKDAY`` counts from Sunday = 1 and
  ``WEEK`` from the week of January 1st, as under SQL Server's default ``DATEFIRST 7``.

An offset outside -14:00..+14:00 is SQL Server's error 9810.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3

from .. import errors

_OFFSET = re.compile(r"^\s*([+-])(\d{1,2}):(\d{2})\s*$")
_MAX_MINUTES = 14 * 60


def offset_minutes(offset: str | int | None) -> int | None:
    """``'+05:30'`` or a number of minutes, checked as SQL Server checks it."""
    if offset is None:
        return None
    if isinstance(offset, int):
        minutes = offset
    else:
        match = _OFFSET.match(str(offset))
        if match is None:
            raise errors.server_error(9810, "The timezone provided to builtin function is invalid.")
        sign = -1 if match.group(1) == "-" else 1
        minutes = sign * (int(match.group(2)) * 60 + int(match.group(3)))
    if abs(minutes) > _MAX_MINUTES:
        raise errors.server_error(9810, "The timezone provided to builtin function is invalid.")
    return minutes


def _split(text: str) -> tuple[dt.datetime, str]:
    """``YYYY-MM-DD[ HH:MM:SS[.f...]]`` as a datetime to the second and its fraction digits."""
    text = text.strip()
    if len(text) == 10:
        return dt.datetime.fromisoformat(text), "0000000"
    whole, _, fraction = text[: 19 + 1 + 7].partition(".")
    return dt.datetime.fromisoformat(whole[:19]), (fraction + "0000000")[:7]


def _dto_text(utc: dt.datetime, fraction: str, minutes: int) -> str:
    sign = "-" if minutes < 0 else "+"
    hours, mins = divmod(abs(minutes), 60)
    return f"{utc:%Y-%m-%d %H:%M:%S}.{fraction} {sign}{hours:02d}:{mins:02d}"


def _dto_parts(text: str) -> tuple[dt.datetime, str, int]:
    """A stored datetimeoffset: its UTC instant (to the second), fraction and offset minutes."""
    utc, fraction = _split(text[:27])
    minutes = offset_minutes(text[28:34]) or 0
    return utc, fraction, minutes


def to_datetimeoffset(local: str | None, offset: str | int | None) -> str | None:
    minutes = offset_minutes(offset)
    if local is None or minutes is None:
        return None
    moment, fraction = _split(local)
    return _dto_text(moment - dt.timedelta(minutes=minutes), fraction, minutes)


def switch_offset(value: str | None, offset: str | int | None) -> str | None:
    minutes = offset_minutes(offset)
    if value is None or minutes is None:
        return None
    utc, fraction, _ = _dto_parts(value)
    return _dto_text(utc, fraction, minutes)


def date_part(unit: str, value: str | None, kind: str) -> int | None:
    """``DATEPART(unit, value)``; ``kind`` is ``dto``, ``time`` or ``datetime`` (date too)."""
    if value is None:
        return None
    minutes = 0
    if kind == "dto":
        utc, fraction, minutes = _dto_parts(value)
        moment = utc + dt.timedelta(minutes=minutes)
    elif kind == "time":
        moment = dt.datetime.combine(dt.date(1900, 1, 1), dt.time.fromisoformat(value[:8]))
        fraction = (value[9:] + "0000000")[:7] if len(value) > 8 else "0000000"
    else:
        moment, fraction = _split(value)
    nanos = int(fraction) * 100
    parts = {
        "YEAR": moment.year,
        "QUARTER": (moment.month - 1) // 3 + 1,
        "MONTH": moment.month,
        "DAYOFYEAR": moment.timetuple().tm_yday,
        "DAY": moment.day,
        "DAYOFWEEK": moment.isoweekday() % 7 + 1,  # Sunday = 1 (DATEFIRST 7)
        "HOUR": moment.hour,
        "MINUTE": moment.minute,
        "SECOND": moment.second,
        "MILLISECOND": nanos // 1_000_000,
        "MICROSECOND": nanos // 1_000,
        "NANOSECOND": nanos,
        "TIMEZONE_MINUTE": minutes,
        "WEEKISO": moment.isocalendar()[1],
    }
    if unit == "WEEK":  # weeks start on Sunday; January 1st is in week 1
        first = dt.date(moment.year, 1, 1)
        start = first - dt.timedelta(days=first.isoweekday() % 7)
        return (moment.date() - start).days // 7 + 1
    return parts[unit]


_ADD_UNITS = {
    "YEAR": ("months", 12), "YY": ("months", 12), "YYYY": ("months", 12),
    "QUARTER": ("months", 3), "QQ": ("months", 3), "Q": ("months", 3),
    "MONTH": ("months", 1), "MM": ("months", 1), "M": ("months", 1),
    "DAY": ("days", 1), "DD": ("days", 1), "D": ("days", 1),
    "DAYOFYEAR": ("days", 1), "DY": ("days", 1), "Y": ("days", 1),
    "WEEKDAY": ("days", 1), "DW": ("days", 1), "W": ("days", 1),
    "WEEK": ("days", 7), "WK": ("days", 7), "WW": ("days", 7),
    "HOUR": ("ticks", 36_000_000_000), "HH": ("ticks", 36_000_000_000),
    "MINUTE": ("ticks", 600_000_000), "MI": ("ticks", 600_000_000), "N": ("ticks", 600_000_000),
    "SECOND": ("ticks", 10_000_000), "SS": ("ticks", 10_000_000), "S": ("ticks", 10_000_000),
    "MILLISECOND": ("ticks", 10_000), "MS": ("ticks", 10_000),
    "MICROSECOND": ("ticks", 10), "MCS": ("ticks", 10),
}  # fmt: skip
ADD_UNITS = frozenset(_ADD_UNITS)


def date_add(unit: str, number: int | None, value: str | None) -> str | None:
    """``DATEADD(unit, number, value)`` of a stored ``date``/``datetime``/``datetime2`` value, in
    the same stored form (a month added to January 31st gives the month's last day, as in SQL
    Server; 100 ns ticks, so NANOSECOND is not offered)."""
    if value is None or number is None:
        return None
    kind, size = _ADD_UNITS[unit]
    moment, fraction = _split(value)
    if kind == "months":
        months = moment.year * 12 + moment.month - 1 + int(number) * size
        year, month = divmod(months, 12)
        last = (dt.date(year + (month == 11), (month + 1) % 12 + 1, 1) - dt.timedelta(days=1)).day
        moment = moment.replace(year=year, month=month + 1, day=min(moment.day, last))
    elif kind == "days":
        moment += dt.timedelta(days=int(number) * size)
    else:
        ticks = int(fraction) + int(number) * size
        seconds, rest = divmod(ticks, 10_000_000)
        moment += dt.timedelta(seconds=seconds)
        fraction = f"{rest:07d}"
    if not 1 <= moment.year <= 9999:
        raise errors.server_error(
            517, "Adding a value to a 'datetime' column caused an overflow.", sqlstate="22007"
        )
    if len(value.strip()) == 10:
        return f"{moment:%Y-%m-%d}"
    digits = len(value.strip()) - 20 if len(value.strip()) > 19 else 0
    text = f"{moment:%Y-%m-%d %H:%M:%S}"
    return f"{text}.{fraction[:digits]}" if digits > 0 else text


UNITS = frozenset(
    (
        "YEAR",
        "QUARTER",
        "MONTH",
        "DAYOFYEAR",
        "DAY",
        "DAYOFWEEK",
        "HOUR",
        "MINUTE",
        "SECOND",
        "MILLISECOND",
        "MICROSECOND",
        "NANOSECOND",
        "TIMEZONE_MINUTE",
        "WEEKISO",
        "WEEK",
    )
)


def register(db: sqlite3.Connection) -> None:
    db.create_function("_emu_todto", 2, to_datetimeoffset, deterministic=True)
    db.create_function("_emu_switchoffset", 2, switch_offset, deterministic=True)
    db.create_function("_emu_datepart", 3, date_part, deterministic=True)
    db.create_function("_emu_dateadd", 3, date_add, deterministic=True)
