"""Pure SQLite functions every emulator connection registers (LSNs, update masks, names).

LSNs are 80-bit big-endian values. Inside the bookkeeping tables they are kept as SQLite integers
(they fit while the VLF part stays below 2**15); T-SQL only ever sees them as ``binary(10)``.

Update masks follow SQL Server's layout: one bit per captured column ordinal, ``ceil(n/8)`` bytes,
big-endian, ordinal 1 in the lowest bit of the *last* byte.
"""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from typing import Any

from .types import SqlType

LSN_BYTES = 10


def lsn_bytes(value: int | None) -> bytes | None:
    """An LSN kept as an integer -> ``binary(10)``."""
    if value is None:
        return None
    return int(value).to_bytes(LSN_BYTES, "big")


def lsn_int(value: bytes | None) -> int | None:
    if value is None:
        return None
    return int.from_bytes(bytes(value), "big")


def lsn_parts_text(value: int | None) -> str | None:
    """``vlf:block:slot`` in hex, the form ``sys.dm_cdc_log_scan_sessions`` shows."""
    if value is None:
        return None
    return f"{value >> 48:08x}:{(value >> 16) & 0xFFFFFFFF:08x}:{value & 0xFFFF:04x}"


def lsn_numeric(value: int) -> int:
    """The numeric(25,0) form ``vlf * 10**15 + block * 10**5 + slot``."""
    return (value >> 48) * 10**15 + ((value >> 16) & 0xFFFFFFFF) * 10**5 + (value & 0xFFFF)


def _increment(value: bytes | None) -> bytes | None:
    if value is None:
        return None
    number = int.from_bytes(bytes(value), "big") + 1
    return (number % (1 << 80)).to_bytes(LSN_BYTES, "big")


def _decrement(value: bytes | None) -> bytes | None:
    if value is None:
        return None
    number = int.from_bytes(bytes(value), "big") - 1
    return (number % (1 << 80)).to_bytes(LSN_BYTES, "big")


def full_mask(count: int) -> bytes:
    """The update mask with every captured column's bit set (inserts and deletes)."""
    size = max(1, (count + 7) // 8)
    return ((1 << count) - 1).to_bytes(size, "big")


@lru_cache(maxsize=1024)
def _column_ids(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def _mask(changed: str | None, column_ids: str) -> bytes:
    """Update mask of one update row.

    ``changed`` has one character per source column id ('1' = changed); ``column_ids`` lists the
    source column ids of the capture instance's columns in ordinal order.
    """
    ids = _column_ids(column_ids)
    bits = 0
    if changed:
        for ordinal, cid in enumerate(ids):
            if cid <= len(changed) and changed[cid - 1] == "1":
                bits |= 1 << ordinal
    size = max(1, (len(ids) + 7) // 8)
    return bits.to_bytes(size, "big")


def _bit_set(mask: bytes | None, ordinal: int | None) -> int | None:
    """``sys.fn_cdc_is_bit_set`` / ``sys.fn_cdc_has_column_changed``."""
    if mask is None or ordinal is None:
        return None
    ordinal = int(ordinal)
    if ordinal < 1:
        return 0
    data = bytes(mask)
    index = len(data) - 1 - (ordinal - 1) // 8
    if index < 0:
        return 0
    return 1 if data[index] >> ((ordinal - 1) % 8) & 1 else 0


class _MaskOr:
    """Aggregate: bitwise OR of update masks (``all with mask`` net changes)."""

    def __init__(self) -> None:
        self.value: int | None = None
        self.size = 0

    def step(self, mask: bytes | None) -> None:
        if mask is None:
            return
        data = bytes(mask)
        self.size = max(self.size, len(data))
        self.value = (self.value or 0) | int.from_bytes(data, "big")

    def finalize(self) -> bytes | None:
        if self.value is None:
            return None
        return self.value.to_bytes(self.size, "big")


_NAME_PART = re.compile(r'\s*(?:\[((?:[^\]]|\]\])*)\]|"((?:[^"]|"")*)"|([^.\s]+))\s*(?:\.|$)')


def split_object_name(text: str | None) -> tuple[str | None, ...]:
    """``[db].[dbo].[t]`` / ``dbo.t`` / ``t`` -> name parts, last part last."""
    if text is None:
        return ()
    parts: list[str | None] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _NAME_PART.match(text, pos)
        if not match or match.end() == pos:
            return ()
        bracket, quoted, bare = match.groups()
        if bracket is not None:
            parts.append(bracket.replace("]]", "]"))
        elif quoted is not None:
            parts.append(quoted.replace('""', '"'))
        else:
            parts.append(bare)
        pos = match.end()
    return tuple(parts)


def _objname(text: str | None, part: int) -> str | None:
    """Part of a multi-part object name: 0 = object, 1 = schema (default dbo)."""
    parts = split_object_name(text)
    if not parts:
        return None
    if part == 0:
        return parts[-1]
    if len(parts) >= 2 and parts[-2]:
        return parts[-2]
    return "dbo"


def _binary_norm(value: bytes | None) -> bytes | None:
    """SQL Server compares binary values as if the shorter were padded with 0x00."""
    if value is None or not isinstance(value, bytes):
        return value
    return value.rstrip(b"\x00")


def _decimal_text(value: Any, precision: int, scale: int) -> Any:
    """A number as the stored form of ``decimal(precision, scale)`` (CAST of an integer or a
    float to a decimal wider than 15 digits), rounded half up as SQL Server rounds."""
    return SqlType("decimal", precision=int(precision), scale=int(scale)).encode(value)


def register_pure(db: sqlite3.Connection) -> None:
    """Register the functions that need no connection state."""
    db.create_function("_emu_lsn", 1, lsn_bytes, deterministic=True)
    db.create_function("_emu_lsn_inc", 1, _increment, deterministic=True)
    db.create_function("_emu_lsn_dec", 1, _decrement, deterministic=True)
    db.create_function("_emu_mask", 2, _mask, deterministic=True)
    db.create_function("_emu_bit_set", 2, _bit_set, deterministic=True)
    db.create_function("_emu_objname", 2, _objname, deterministic=True)
    db.create_function("_emu_bin_norm", 1, _binary_norm, deterministic=True)
    db.create_function("_emu_decimal_text", 3, _decimal_text, deterministic=True)
    db.create_aggregate("_emu_mask_or", 1, _MaskOr)  # type: ignore[arg-type]
