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
