"""SQL Server column types as Arrow types, and rows as Arrow record batches (DESIGN.md section 5).

The mapping is exact where Arrow and Spark can hold the value, and never drops a column: an
unknown type (``sql_variant``, ``hierarchyid``, ``geometry``, ``geography``, a user-defined alias
type) becomes a string, with a warning recorded for the asset metadata. Notes on the choices:

- ``tinyint`` is unsigned in SQL Server and Spark has no unsigned byte, so it widens to int16.
- ``money``/``smallmoney`` are fixed-point with scale 4: decimal128(19, 4) / decimal128(10, 4).
- ``datetime2(7)``/``time(7)`` carry 100 ns ticks, but pyodbc (and so the emulator) returns
  microseconds; the Arrow unit is ``us`` (Spark's timestamp precision too).
- ``datetimeoffset`` becomes a UTC instant (``timestamp("us", tz="UTC")``); the original offset
  is not kept. :mod:`.connection` registers a pyodbc converter so the values arrive tz-aware.
- ``uniqueidentifier`` stays the upper-case string pyodbc returns; ``xml`` is a string.

Data type reference: https://learn.microsoft.com/en-us/sql/t-sql/data-types/data-types-transact-sql
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from .column_masks import hash_converter
from .dbapi import DbapiCursor, translating

__all__ = [
    "COMMIT_TIME",
    "METADATA_FIELDS",
    "ArrowMapping",
    "ArrowSchema",
    "ColumnLike",
    "arrow_mapping",
    "arrow_schema",
    "datetimeoffset_from_odbc",
    "read_record_batches",
    "rows_to_record_batch",
]


class ColumnLike(Protocol):
    """What the mapping needs from a catalog column (``catalog.Column`` satisfies it)."""

    @property
    def name(self) -> str: ...
    @property
    def type_name(self) -> str: ...
    @property
    def precision(self) -> int: ...
    @property
    def scale(self) -> int: ...
    @property
    def nullable(self) -> bool: ...


Converter = Callable[[Any], Any]


@dataclass(frozen=True)
class ArrowMapping:
    """The Arrow type of a column, plus a value converter and a warning for unknown types."""

    type: pa.DataType
    converter: Converter | None = None
    warning: str | None = None


_FIXED: dict[str, pa.DataType] = {
    "tinyint": pa.int16(),
    "smallint": pa.int16(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "bit": pa.bool_(),
    "money": pa.decimal128(19, 4),
    "smallmoney": pa.decimal128(10, 4),
    "float": pa.float64(),
    "real": pa.float32(),
    "char": pa.string(),
    "varchar": pa.string(),
    "nchar": pa.string(),
    "nvarchar": pa.string(),
    "text": pa.string(),
    "ntext": pa.string(),
    "xml": pa.string(),
    "uniqueidentifier": pa.string(),
    "sysname": pa.string(),
    "binary": pa.binary(),
    "varbinary": pa.binary(),
    "image": pa.binary(),
    "timestamp": pa.binary(),
    "rowversion": pa.binary(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "datetime": pa.timestamp("us"),
    "datetime2": pa.timestamp("us"),
    "smalldatetime": pa.timestamp("us"),
    "datetimeoffset": pa.timestamp("us", tz="UTC"),
}

_DECIMAL = frozenset({"decimal", "numeric"})


def datetimeoffset_from_odbc(value: bytes | None) -> dt.datetime | None:
    """pyodbc output converter for ``datetimeoffset`` (SQL_SS_TIMESTAMPOFFSET_STRUCT)."""
    if value is None:
        return None
    year, month, day, hour, minute, second, fraction_ns, tz_hour, tz_minute = struct.unpack(
        "<6hI2h", value
    )
    return dt.datetime(
        year,
        month,
        day,
        hour,
        minute,
        second,
        fraction_ns // 1000,
        tzinfo=dt.timezone(dt.timedelta(hours=tz_hour, minutes=tz_minute)),
    )


def _as_datetimeoffset(value: Any) -> Any:
    """A raw ``datetimeoffset`` (no output converter registered on the connection) decoded."""
    return datetimeoffset_from_odbc(value) if isinstance(value, bytes) else value


def _as_text(value: Any) -> Any:
    """Unknown types: bytes as ``0x…`` hex (as SSMS shows them), anything else via ``str``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex().upper()
    return str(value)


def arrow_mapping(type_name: str, precision: int = 0, scale: int = 0) -> ArrowMapping:
    """The Arrow type for a SQL Server type name (``sys.types.name``) with its precision/scale."""
    name = type_name.lower()
    if name in _DECIMAL:
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            return ArrowMapping(
                pa.string(),
                _as_text,
                f"{type_name}({precision},{scale}) has an invalid precision/scale; "
                "carried as string",
            )
        return ArrowMapping(pa.decimal128(precision, scale))
    mapped = _FIXED.get(name)
    if name == "datetimeoffset":
        return ArrowMapping(pa.timestamp("us", tz="UTC"), _as_datetimeoffset)
    if mapped is not None:
        return ArrowMapping(mapped)
    return ArrowMapping(
        pa.string(),
        _as_text,
        f"SQL Server type {type_name!r} has no exact Arrow mapping; carried as string",
    )


# CDC metadata columns of a change row, in the order changes.py selects them, and the commit time.
METADATA_FIELDS: tuple[pa.Field, ...] = (
    pa.field("__$start_lsn", pa.binary(), nullable=False),
    pa.field("__$command_id", pa.int32(), nullable=True),
    pa.field("__$seqval", pa.binary(), nullable=False),
    pa.field("__$operation", pa.int32(), nullable=False),
    pa.field("__$update_mask", pa.binary(), nullable=True),
)
COMMIT_TIME = pa.field("__$commit_time", pa.timestamp("us"), nullable=True)


@dataclass(frozen=True)
class ArrowSchema:
    """An Arrow schema for some columns, their value converters and any mapping warnings."""

    schema: pa.Schema
    converters: tuple[Converter | None, ...]
    warnings: tuple[str, ...] = field(default=())


def arrow_schema(
    columns: Iterable[ColumnLike],
    *,
    prefix: Sequence[pa.Field] = (),
    suffix: Sequence[pa.Field] = (),
    all_nullable: bool = False,
) -> ArrowSchema:
    """The schema of ``columns`` (between optional fixed ``prefix``/``suffix`` fields).

    ``all_nullable`` marks every column nullable (change rows: a dropped captured column reads
    as NULL even when the source column was NOT NULL).
    """
    fields: list[pa.Field] = list(prefix)
    converters: list[Converter | None] = [None] * len(prefix)
    warnings: list[str] = []
    for column in columns:
        mapping = arrow_mapping(column.type_name, column.precision, column.scale)
        fields.append(pa.field(column.name, mapping.type, nullable=all_nullable or column.nullable))
        mask = getattr(column, "mask", None)  # a hashed column: hashed as it is read
        if mask is not None and mask.key is not None:
            converters.append(hash_converter(mask.key))
            continue
        converters.append(mapping.converter)
        if mapping.warning:
            warnings.append(f"column {column.name!r}: {mapping.warning}")
    fields.extend(suffix)
    converters.extend([None] * len(suffix))
    return ArrowSchema(pa.schema(fields), tuple(converters), tuple(warnings))


def rows_to_record_batch(
    rows: Sequence[Sequence[Any]],
    schema: pa.Schema,
    converters: Sequence[Converter | None] | None = None,
) -> pa.RecordBatch:
    """Build a record batch column-wise: transpose the row tuples, one ``pa.array`` per column."""
    width = len(schema)
    if not rows:
        return pa.RecordBatch.from_arrays(
            [pa.array([], type=f.type) for f in schema], schema=schema
        )
    columns = list(zip(*rows, strict=True))
    if len(columns) != width:
        raise ValueError(f"rows have {len(columns)} values, the schema has {width} fields")
    arrays = []
    for index, (values, schema_field) in enumerate(zip(columns, schema, strict=True)):
        convert = converters[index] if converters is not None else None
        data = [convert(v) for v in values] if convert is not None else values
        arrays.append(pa.array(data, type=schema_field.type, from_pandas=False))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_record_batches(
    cursor: DbapiCursor, schema: ArrowSchema, batch_rows: int, **context: Any
) -> Iterator[pa.RecordBatch]:
    """The rows of an executed ``cursor`` as record batches of at most ``batch_rows`` rows
    (``fetchmany``; driver errors translated with ``context``); closes the cursor."""
    try:
        while True:
            with translating(**context):
                rows = cursor.fetchmany(batch_rows)
            if not rows:
                break
            yield rows_to_record_batch(rows, schema.schema, schema.converters)
    finally:
        cursor.close()
