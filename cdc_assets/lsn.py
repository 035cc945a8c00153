"""Log sequence numbers (LSNs) and LSN ranges, the value types every layer shares.

A SQL Server LSN is ``binary(10)``: the virtual log file (VLF) sequence number (4 bytes), the log
block (4 bytes) and the slot in the block (2 bytes), compared as unsigned big-endian bytes. It is
written three ways, all accepted here:

- bytes, as ``__$start_lsn`` and the CDC functions return it;
- hex, ``0x0000002A000001B80003`` (as SQL Server Management Studio shows it);
- ``vlf:block:slot`` in hex, ``0000002a:000001b8:0003`` (as ``fn_dblog`` shows it);
- numeric(25,0), ``vlf * 10**15 + block * 10**5 + slot``, the form of
  ``sys.dm_tran_database_transactions.database_transaction_begin_lsn``.

Partition keys use 20 lower-case hex digits (:attr:`Lsn.key`): fixed width, so string order is LSN
order. An :class:`LsnRange` is the half-open interval ``(lo, hi]`` of commit LSNs, written as the
partition key ``<lo>-<hi>`` (DESIGN.md section 4).

Change rows are ordered by :data:`CHANGE_ORDER`, (``__$start_lsn``, ``__$command_id``,
``__$seqval``, ``__$operation``), as SQL Server defines it: ``__$seqval`` alone misorders some
statements of one transaction. Every sort of change rows uses it (:func:`change_order` writes it
as SQL).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import total_ordering
from typing import ClassVar

LSN_BYTES = 10
_MAX_INT = (1 << (8 * LSN_BYTES)) - 1
_KEY_RE = re.compile(r"^[0-9a-f]{20}$")
_HEX_RE = re.compile(r"^(?:0x)?([0-9a-fA-F]{20})$")
_PARTS_RE = re.compile(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,8}):([0-9a-fA-F]{1,4})$")

# a change row's columns that order it, and that order
START_LSN = "__$start_lsn"  # the commit LSN of the change's transaction
COMMAND_ID = "__$command_id"  # the statement in the transaction (SQL Server 2017 on)
SEQVAL = "__$seqval"  # the change's place in the transaction
OPERATION = "__$operation"  # 1 delete, 2 insert, 3 update before image, 4 update after image
CHANGE_ORDER: tuple[str, ...] = (START_LSN, COMMAND_ID, SEQVAL, OPERATION)
# what each ``__$operation`` code is called where rows are counted per operation
OPERATION_NAMES = {1: "delete", 2: "insert", 3: "update_before", 4: "update_after"}


def change_order(quote: Callable[[str], str], *, descending: bool = False) -> str:
    """:data:`CHANGE_ORDER` as an SQL ``ORDER BY`` list, each column as ``quote`` writes it."""
    return ", ".join(quote(c) + (" DESC" if descending else "") for c in CHANGE_ORDER)


class LsnError(ValueError):
    """A value that is not a valid LSN or LSN range; the message says what was expected."""


@total_ordering
@dataclass(frozen=True, slots=True)
class Lsn:
    """An immutable, ordered 10-byte SQL Server log sequence number."""

    raw: bytes

    ZERO: ClassVar[Lsn]
    MAX: ClassVar[Lsn]

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != LSN_BYTES:
            raise LsnError(f"an LSN is exactly {LSN_BYTES} bytes (binary(10)); got {self.raw!r}")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, value: bytes | bytearray | memoryview) -> Lsn:
        return cls(bytes(value))

    @classmethod
    def from_int(cls, value: int) -> Lsn:
        if not 0 <= value <= _MAX_INT:
            raise LsnError(f"an LSN as an integer lies in [0, 2**80); got {value}")
        return cls(value.to_bytes(LSN_BYTES, "big"))

    @classmethod
    def from_parts(cls, vlf: int, block: int, slot: int) -> Lsn:
        if not (0 <= vlf < 1 << 32 and 0 <= block < 1 << 32 and 0 <= slot < 1 << 16):
            raise LsnError(
                f"LSN parts out of range: vlf {vlf} (4 bytes), block {block} (4 bytes), "
                f"slot {slot} (2 bytes)"
            )
        return cls(vlf.to_bytes(4, "big") + block.to_bytes(4, "big") + slot.to_bytes(2, "big"))

    @classmethod
    def from_hex(cls, text: str) -> Lsn:
        """``0x`` followed by 20 hex digits (the ``0x`` is optional; case does not matter)."""
        match = _HEX_RE.match(text.strip())
        if not match:
            raise LsnError(f"expected an LSN as 0x followed by 20 hex digits; got {text!r}")
        return cls(bytes.fromhex(match.group(1)))

    @classmethod
    def from_numeric(cls, value: Decimal | int | str) -> Lsn:
        """The numeric(25,0) form: ``vlf * 10**15 + block * 10**5 + slot``."""
        number = int(Decimal(value))
        if number < 0:
            raise LsnError(f"a numeric LSN is not negative; got {value}")
        vlf, rest = divmod(number, 10**15)
        block, slot = divmod(rest, 10**5)
        return cls.from_parts(vlf, block, slot)

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """Any textual form: ``0x…`` hex, 20 hex digits, or ``vlf:block:slot``."""
        text = text.strip()
        parts = _PARTS_RE.match(text)
        if parts:
            return cls.from_parts(*(int(p, 16) for p in parts.groups()))
        try:
            return cls.from_hex(text)
        except LsnError:
            raise LsnError(
                "expected an LSN as 0x + 20 hex digits (0x0000002A000001B80003), "
                f"20 hex digits, or vlf:block:slot in hex (2a:1b8:3); got {text!r}"
            ) from None

    # -- views ------------------------------------------------------------------------------
    def __int__(self) -> int:
        return int.from_bytes(self.raw, "big")

    @property
    def vlf(self) -> int:
        return int.from_bytes(self.raw[:4], "big")

    @property
    def block(self) -> int:
        return int.from_bytes(self.raw[4:8], "big")

    @property
    def slot(self) -> int:
        return int.from_bytes(self.raw[8:], "big")

    @property
    def key(self) -> str:
        """20 lower-case hex digits: fixed width, so string order equals LSN order."""
        return self.raw.hex()

    @property
    def hex(self) -> str:
        """``0x`` + 20 upper-case hex digits, as SQL Server tools print binary(10)."""
        return "0x" + self.raw.hex().upper()

    @property
    def numeric(self) -> Decimal:
        return Decimal(self.vlf * 10**15 + self.block * 10**5 + self.slot)

    def parts(self) -> str:
        return f"{self.vlf:08x}:{self.block:08x}:{self.slot:04x}"

    # -- arithmetic -------------------------------------------------------------------------
    def increment(self) -> Lsn:
        """The next LSN in byte order, like ``sys.fn_cdc_increment_lsn``."""
        return Lsn.from_int(int(self) + 1)

    def decrement(self) -> Lsn:
        """The previous LSN in byte order, like ``sys.fn_cdc_decrement_lsn``."""
        return Lsn.from_int(int(self) - 1)

    # -- ordering ---------------------------------------------------------------------------
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Lsn):
            return NotImplemented
        return self.raw < other.raw  # bytes compare unsigned, big-endian: LSN order

    def __str__(self) -> str:
        return self.hex

    def __repr__(self) -> str:
        return f"Lsn({self.hex})"


Lsn.ZERO = Lsn(bytes(LSN_BYTES))
Lsn.MAX = Lsn(b"\xff" * LSN_BYTES)


@dataclass(frozen=True, slots=True)
class LsnRange:
    """The half-open range ``(lo, hi]`` of commit LSNs: ``lo < __$start_lsn <= hi``.

    Query it from ``fn_cdc_increment_lsn(lo)`` to ``hi`` (both inclusive). Its partition key is
    ``<lo.key>-<hi.key>``. An empty range (``lo == hi``) is not a valid partition.
    """

    lo: Lsn
    hi: Lsn

    def __post_init__(self) -> None:
        if not self.lo < self.hi:
            raise LsnError(
                f"an LSN range (lo, hi] needs lo < hi; got lo={self.lo.hex}, hi={self.hi.hex}"
            )

    @property
    def key(self) -> str:
        return f"{self.lo.key}-{self.hi.key}"

    @property
    def first(self) -> Lsn:
        """The lowest LSN the range contains (``fn_cdc_increment_lsn(lo)``)."""
        return self.lo.increment()

    def __contains__(self, lsn: object) -> bool:
        return isinstance(lsn, Lsn) and self.lo < lsn <= self.hi

    def follows(self, previous: LsnRange) -> bool:
        """True when this range continues ``previous`` with no gap and no overlap."""
        return self.lo == previous.hi

    @classmethod
    def is_key(cls, key: str) -> bool:
        try:
            cls.parse_key(key)
        except LsnError:
            return False
        return True

    @classmethod
    def parse_key(cls, key: str) -> LsnRange:
        """Parse ``<lo>-<hi>`` (each 20 lower-case hex digits, lo < hi)."""
        lo, sep, hi = key.partition("-")
        if not sep or not _KEY_RE.match(lo) or not _KEY_RE.match(hi):
            raise LsnError(
                "an LSN range partition key is <lo>-<hi>, each 20 lower-case hex digits, "
                f"e.g. 0000002a000001b80003-0000002a000001c00001; got {key!r}"
            )
        try:
            return cls(Lsn(bytes.fromhex(lo)), Lsn(bytes.fromhex(hi)))
        except LsnError as exc:
            raise LsnError(f"bad LSN range partition key {key!r}: {exc}") from None

    def __str__(self) -> str:
        return f"({self.lo.hex}, {self.hi.hex}]"
