"""Columns Delta cannot store as they are, and how they are stored: one form, written alike by
Spark and by the driver's paths (delta-rs, the deletion-vector MERGE).

- SQL Server ``time`` columns (Spark's ``TimeType``) are stored as text, as Spark casts a time
  to a string: ``HH:MM:SS``, then a dot and the fraction of a second without its trailing zeros
  when there is one (``10:11:12``, ``10:11:12.5``, ``10:11:12.000001``), whatever the precision.
  Delta has no time type.
- Names with a character Delta refuses in plain column names (:data:`INVALID_IN_NAMES`) are
  stored with each such character as ``_xHH_`` (``line no`` -> ``line_x20_no``). Delta's column
  mapping would keep them, but delta-rs (the sensor's reader) cannot read such tables.

The field's metadata keeps what was changed (:data:`STORED_TYPE`, :data:`STORED_NAME`), so a
read gives the type and the name back (:func:`decode_from_delta` in Spark, :func:`decode_rows`
in the driver). Readers that know nothing of it (DuckDB, polars, delta-rs) see the text and the
escaped names. The functions here come in pairs, one for Spark frames and one for schemas and
Arrow rows held in the driver; the tests prove both give the same stored schema and values.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from .spark_sql_names import column

STORED_TYPE = "cdc_assets.type"  # in a field's metadata: the type the column had (time(6))
STORED_NAME = "cdc_assets.name"  # ... and the name it had, when the stored one differs
INVALID_IN_NAMES = " ,;{}()\n\t="
_TIME_TYPE = re.compile(r"^time\(([0-6])\)$")
_MICROS_PER_SECOND = 1_000_000


# Columns Delta cannot store as they are (time, names with a space ...) are stored otherwise, by
# Spark's writes and the driver's alike: see .stored_columns.
# timestamp_ntz (datetime2) columns may first arrive with a later partition or schema: a table
# created without the feature refuses them ("requires manual enablement"), so every table has it.
TABLE_PROPERTIES: dict[str, str] = {"delta.feature.timestampNtz": "supported"}


def stored_name(name: str) -> str:
    """``name`` with the characters Delta refuses as ``_xHH_``."""
    return "".join(f"_x{ord(c):02x}_" if c in INVALID_IN_NAMES else c for c in name)


def needs_encoding(schema: T.StructType) -> bool:
    """Some column of ``schema`` is stored otherwise (:func:`encode_for_delta`)."""
    return any(
        isinstance(f.dataType, T.TimeType) or stored_name(f.name) != f.name for f in schema.fields
    )


def stored_otherwise(schema: T.StructType) -> bool:
    """Some column of the stored ``schema`` is not stored as it is (:func:`encode_for_delta`)."""
    return any({STORED_TYPE, STORED_NAME} & set(f.metadata or {}) for f in schema.fields)


# -- Spark frames ---------------------------------------------------------------------------


def encode_for_delta(df: DataFrame) -> DataFrame:
    """Columns Delta cannot store as they are: ``time`` as text, names with characters Delta
    refuses escaped; the field's metadata keeps the type and the name. A frame without such
    columns is returned as it is (each column named here is a call into the JVM)."""
    if not needs_encoding(df.schema):
        return df
    columns = []
    for f in df.schema.fields:
        metadata: dict[str, str] = {}
        value = column(f.name)
        if isinstance(f.dataType, T.TimeType):
            value = value.cast("string")
            metadata[STORED_TYPE] = f.dataType.simpleString()
        name = stored_name(f.name)
        if name != f.name:
            metadata[STORED_NAME] = f.name
        columns.append(value.alias(name, metadata=metadata) if metadata else value)
    return df.select(*columns)


def decode_from_delta(df: DataFrame) -> DataFrame:
    """The columns :func:`encode_for_delta` changed, back as they were (the frame as it is
    when it has none)."""
    fields = df.schema.fields
    if not stored_otherwise(df.schema):
        return df
    columns = []
    for f in fields:
        meta = dict(f.metadata or {})
        stored_type, name = meta.pop(STORED_TYPE, None), meta.pop(STORED_NAME, None)
        value = column(f.name)
        if stored_type:
            value = value.cast(stored_type)
        if stored_type or name:
            # explicit metadata: without it the alias would keep the stored type and name
            value = value.alias(name or f.name, metadata=meta)
        columns.append(value)
    return df.select(*columns)


# -- schemas and Arrow rows in the driver ---------------------------------------------------


def stored_schema(schema: T.StructType) -> T.StructType:
    """The schema :func:`encode_for_delta` gives a frame of ``schema``, without Spark."""
    fields = []
    for f in schema.fields:
        metadata: dict[str, str] = {}
        kind = f.dataType
        if isinstance(kind, T.TimeType):
            metadata[STORED_TYPE] = kind.simpleString()
            kind = T.StringType()
        name = stored_name(f.name)
        if name != f.name:
            metadata[STORED_NAME] = f.name
        fields.append(T.StructField(name, kind, f.nullable, metadata) if metadata else f)
    return T.StructType(fields)


def source_schema(stored: T.StructType) -> T.StructType | None:
    """The schema :func:`decode_from_delta` gives a stored frame of ``stored``, without Spark;
    None when a column's stored type is not one :func:`decode_rows` reads back."""
    fields = []
    for f in stored.fields:
        meta = dict(f.metadata or {})
        stored_type, name = meta.pop(STORED_TYPE, None), meta.pop(STORED_NAME, None)
        kind, nullable = f.dataType, f.nullable
        if stored_type:
            match = _TIME_TYPE.match(stored_type)
            if match is None or not isinstance(kind, T.StringType):
                return None
            kind, nullable = T.TimeType(int(match.group(1))), True  # a cast of text may be null
        if stored_type or name:
            fields.append(T.StructField(name or f.name, kind, nullable, meta))
        else:
            fields.append(f)
    return T.StructType(fields)


def encode_rows(schema: T.StructType, rows: pa.Table) -> pa.Table:
    """``rows`` (Arrow, the columns of ``schema`` in its order) as Delta stores them: the
    columns of :func:`stored_schema` (names escaped, ``time`` as Spark's text)."""
    if not needs_encoding(schema):
        return rows
    arrays = [
        time_text(rows.column(i)) if isinstance(f.dataType, T.TimeType) else rows.column(i)
        for i, f in enumerate(schema.fields)
    ]
    return pa.Table.from_arrays(arrays, names=[stored_name(f.name) for f in schema.fields])


def decode_rows(stored: T.StructType, rows: pa.Table) -> pa.Table:
    """``rows`` as Delta stores them (the columns of ``stored`` in its order) back as the
    source had them: the columns of :func:`source_schema`, a ``time`` as Arrow's time64 in
    nanoseconds (the Arrow type Spark gives it)."""
    source = source_schema(stored)
    if source is None:
        raise ValueError("a column's stored type is not one the driver reads back")
    if not stored_otherwise(stored):
        return rows
    arrays = [
        time_from_text(rows.column(i)) if isinstance(f.dataType, T.TimeType) else rows.column(i)
        for i, f in enumerate(source.fields)
    ]
    return pa.Table.from_arrays(arrays, names=source.names)


def time_text(times: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Times (Arrow time32/time64) as Spark casts a ``TimeType`` to a string: ``HH:MM:SS``,
    and ``.`` with the fraction of a second, trailing zeros dropped, when it is not zero (finer
    than a microsecond is cut off, as Spark's ``TIME(6)`` does)."""
    micros = pc.cast(times, pa.time64("us"), safe=False)
    text = pc.strftime(micros, format="%H:%M:%S")  # the fraction always has six digits
    return pc.utf8_rtrim(pc.utf8_rtrim(text, characters="0"), characters=".")


def time_from_text(text: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Spark's text of a time (:func:`time_text`) back as Arrow's time64 in nanoseconds."""

    def number(start: int, stop: int) -> Any:
        return pc.cast(pc.utf8_slice_codeunits(text, start, stop), pa.int64())

    fraction = pc.utf8_rpad(pc.utf8_slice_codeunits(text, 9, 15), 6, "0")
    seconds = pc.add(
        pc.multiply(pc.add(pc.multiply(number(0, 2), 60), number(3, 5)), 60), number(6, 8)
    )
    micros = pc.add(pc.multiply(seconds, _MICROS_PER_SECOND), pc.cast(fraction, pa.int64()))
    return pc.cast(pc.cast(micros, pa.time64("us")), pa.time64("ns"))
