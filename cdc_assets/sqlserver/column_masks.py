"""Columns masked where their rows are read, before anything is written (issue 41, privacy).

A capture instance whose columns carry rules (:func:`mask_instance`) is read like any other:
every reader builds its ``SELECT`` list and its Arrow schema from the instance's columns, so

- an **excluded** column is not in the instance at all: never selected from SQL Server, in no
  schema, no change log, no mirror (``CaptureInstance.excluded_columns`` names it);
- a **null** column is selected as ``NULL AS [c]``: the value never leaves the server;
- a **redact**\\ed column is selected as a fixed literal of its type (``N'****'`` for strings,
  ``0`` for numbers and ``bit``); other types have no sensible fixed value and are refused;
- a **hash**\\ed column is selected as it is and replaced, in the reader's value converter
  (:func:`hash_converter`, before the row becomes an Arrow batch), by the lower-case hex
  HMAC-SHA256 of its text under a key from the environment: 64 characters, stored as a string
  (declared ``nvarchar(64)``); NULL stays NULL. The same value hashes the same in every table
  and every column under one key, so joins on hashed columns still work.

The text a value is hashed as: a string as it is, binary as its bytes, a date/time in ISO form
(``datetime.isoformat``), a decimal or number as ``str`` gives it (``1.50`` and ``1.5`` differ:
hash columns of one type to join them), all as UTF-8.

The key never appears in a repr, a log line or metadata (:class:`HashKey`); what tells one key
from another in a rule's fingerprint is :attr:`HashKey.key_id`, an HMAC of a fixed text.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from .type_text import sql_type_text

__all__ = [
    "HASH_TYPE",
    "MASK_RULES",
    "ColumnMask",
    "HashKey",
    "MaskError",
    "hash_converter",
    "hash_value",
    "mask_instance",
    "masked_select",
    "rules_fingerprint",
]

MaskRule = Literal["hash", "redact", "null"]
MASK_RULES: tuple[str, ...] = ("hash", "redact", "null")
HASH_TYPE = "nvarchar(64)"  # what a hashed column is stored as: 64 lower-case hex characters

_STRINGS = frozenset({"char", "varchar", "nchar", "nvarchar", "text", "ntext", "sysname", "xml"})
_NUMBERS = frozenset(
    {"tinyint", "smallint", "int", "bigint", "decimal", "numeric", "money", "smallmoney", "float"}
    | {"real", "bit"}
)
REDACTED_TEXT = "****"


class MaskError(ValueError):
    """A rule that cannot apply to its column; the message says which and what to do."""


class HashKey:
    """The HMAC key: its bytes are never shown (repr, str), only :attr:`key_id`."""

    __slots__ = ("_inner", "_outer", "key_id", "secret")

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise MaskError("the hash key is empty; set the variable to a long random value")
        self.secret = secret
        self.key_id = hmac.new(secret, b"cdc_assets key id", hashlib.sha256).hexdigest()[:12]
        # HMAC's two padded key states, copied per value (much cheaper than hmac.new each time)
        block = hashlib.sha256().block_size
        key = hashlib.sha256(secret).digest() if len(secret) > block else secret
        key = key.ljust(block, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def digest_hex(self, data: bytes) -> str:
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()

    def __repr__(self) -> str:
        return f"HashKey(id={self.key_id})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HashKey) and other.key_id == self.key_id

    def __hash__(self) -> int:
        return hash(self.key_id)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled into the executors' read plan
        return (HashKey, (self.secret,))


def _text(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.date | dt.time):
        return value.isoformat().encode("utf-8")
    return str(value).encode("utf-8")


def hash_value(key: HashKey, value: Any) -> str | None:
    """The stored form of ``value`` in a hashed column (module doc); None stays None."""
    return None if value is None else key.digest_hex(_text(value))


def hash_converter(key: HashKey) -> Callable[[Any], Any]:
    """The reader's value converter of a hashed column."""
    digest = key.digest_hex

    def convert(value: Any) -> str | None:
        if value is None:
            return None
        if value.__class__ is str:
            return digest(value.encode("utf-8"))
        return digest(_text(value))

    return convert


@dataclass(frozen=True)
class ColumnMask:
    """How a column is masked: its rule, the key of a hash, and the type the source has."""

    rule: MaskRule
    source_type: str  # e.g. nvarchar(40), shown in the UI beside the rule
    key: HashKey | None = None

    def describe(self) -> str:
        """What the UI's column list says (never the key)."""
        if self.rule == "hash":
            return f"masked: hash (HMAC-SHA256, hex) of {self.source_type}"
        if self.rule == "redact":
            return f"masked: redact (a fixed value of {self.source_type})"
        return f"masked: null (stored as NULL; source type {self.source_type})"


def _redacted_literal(column: Any) -> str:
    name = column.type_name.lower()
    if name in _STRINGS:
        return f"N'{REDACTED_TEXT}'"
    if name in _NUMBERS:
        return "0"
    raise MaskError(
        f"column {column.name!r} ({sql_type_text(column)}): redact has no fixed value for this "
        "type (it redacts strings to '****' and numbers to 0); use hash or null for it"
    )


def masked_select(column: Any, quoted: str) -> str:
    """The ``SELECT`` list item of ``column`` (``quoted``: its reference, e.g. ``ct.[c]``)."""
    mask: ColumnMask | None = getattr(column, "mask", None)
    if mask is None or mask.rule == "hash":
        return quoted
    alias = "[" + column.name.replace("]", "]]") + "]"
    if mask.rule == "null":
        return f"NULL AS {alias}"
    return f"{_redacted_literal(column)} AS {alias}"


def mask_instance(
    instance: Any,
    rules: Mapping[str, str],
    key: HashKey | None,
) -> Any:
    """``instance`` (a ``CaptureInstance``) with ``rules`` (column name -> exclude, hash,
    redact or null; names as the instance spells them) applied: excluded columns dropped and
    named in ``excluded_columns``, masked ones carrying their :class:`ColumnMask` (a hashed
    column becomes ``nvarchar(64)``, a null one nullable). :class:`MaskError` for a key column
    excluded, a hash without key, a redact on a type without a fixed value."""
    if not rules:
        return instance
    keys = set(instance.key_columns)
    columns = []
    excluded = []
    for column in instance.columns:
        rule = rules.get(column.name)
        if rule is None:
            columns.append(column)
        elif rule == "exclude":
            if column.name in keys:
                raise MaskError(
                    f"column {column.name!r} is a key column of {instance.name}: it cannot be "
                    "excluded (the mirror needs it); hash it instead"
                )
            excluded.append(column.name)
        elif rule == "hash":
            if key is None:
                raise MaskError(f"column {column.name!r}: hash needs columns.hash_key_env")
            mask = ColumnMask("hash", sql_type_text(column), key)
            columns.append(
                replace(
                    column, type_name="nvarchar", max_length=128, precision=0, scale=0, mask=mask
                )
            )
        elif rule in ("redact", "null"):
            if rule == "redact":
                _redacted_literal(column)  # refuses a type without a fixed value
            if column.name in keys:
                raise MaskError(
                    f"column {column.name!r} is a key column of {instance.name}: it cannot be "
                    f"masked with {rule} (its rows would collide); hash it instead"
                )
            mask = ColumnMask(rule, sql_type_text(column))  # type: ignore[arg-type]
            columns.append(replace(column, nullable=column.nullable or rule == "null", mask=mask))
        else:
            raise MaskError(f"column {column.name!r}: unknown rule {rule!r}")
    return replace(instance, columns=tuple(columns), excluded_columns=tuple(excluded))


def rules_fingerprint(instance: Any) -> str:
    """What the instance's stored values were produced under: its excluded and masked columns
    and the hash key's id; ``""`` without any rule (so tables without rules never change)."""
    parts = [f"{c}=exclude" for c in sorted(getattr(instance, "excluded_columns", ()))]
    for column in sorted(instance.columns, key=lambda c: c.name):
        mask = getattr(column, "mask", None)
        if mask is not None:
            key_id = f"@{mask.key.key_id}" if mask.key is not None else ""
            parts.append(f"{column.name}={mask.rule}{key_id}")
    if not parts:
        return ""
    return hashlib.sha256(";".join(parts).encode("utf-8")).hexdigest()[:16]
