"""Columns stored otherwise are stored alike by Spark and by the driver: a ``time`` as the text
Spark's cast gives at every precision (SQL Server's time(0) to time(7) are all read as Spark's
time(6)) and back, names escaped, and the same stored schema and field metadata either way."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import types as T

from cdc_assets.spark.stored_columns import (
    INVALID_IN_NAMES,
    decode_from_delta,
    decode_rows,
    encode_for_delta,
    encode_rows,
    source_schema,
    stored_schema,
    time_from_text,
    time_text,
)

PRECISIONS = range(7)  # Spark's TimeType(0) to TimeType(6)


def _times(rng: random.Random) -> list[dt.time]:
    edges = [dt.time(0), dt.time(23, 59, 59, 999_999), dt.time(1, 2, 3, 1), dt.time(10, 0, 0)]
    edges += [dt.time(12, 30, 5, 10**k) for k in range(6)]
    drawn = [
        dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6))
        for _ in range(300)
    ]
    return edges + drawn


def test_time_text_is_spark_s_cast_at_every_precision(spark: SparkSession) -> None:
    times = _times(random.Random(5))
    frame = spark.createDataFrame([(t,) for t in times] + [(None,)], "t time(6)")
    typed = frame.selectExpr(*[f"CAST(t AS TIME({p})) AS `at {p}`" for p in PRECISIONS])
    assert [f.dataType for f in typed.schema] == [T.TimeType(p) for p in PRECISIONS]
    spark_s = encode_for_delta(typed).toArrow()  # Spark's text, one job
    values = typed.toArrow()
    mine = encode_rows(typed.schema, values)
    assert mine.column_names == spark_s.column_names == [f"at_x20_{p}" for p in PRECISIONS]
    for p in PRECISIONS:
        text = spark_s.column(p)
        assert time_text(values.column(p)).to_pylist() == text.to_pylist(), p
        # and back: the text gives the time the column held
        assert time_from_text(text).to_pylist() == values.column(p).to_pylist(), p
    assert decode_rows(stored_schema(typed.schema), mine).equals(
        values.cast(pa.schema([pa.field(f"at {p}", pa.time64("ns")) for p in PRECISIONS]))
    )
    # finer than a microsecond is cut off, as Spark's time(6) does
    nanos = pa.array([1_500, 3_600 * 10**9 + 999], pa.time64("ns"))
    assert time_text(nanos).to_pylist() == ["00:00:00.000001", "01:00:00"]


def test_the_stored_schema_is_the_one_spark_s_encoding_gives(spark: SparkSession) -> None:
    """Names with each character Delta refuses, time columns of every precision (nullable or
    not), a column with metadata of its own: the schema of the stored form and back."""
    fields = [
        T.StructField("id", T.IntegerType(), False, {"comment": "kept"}),
        *(T.StructField(f"t{p}", T.TimeType(p), p % 2 == 0) for p in PRECISIONS),
        *(T.StructField(f"a{c}b", T.StringType()) for c in INVALID_IN_NAMES),
        T.StructField("line no", T.TimeType(6), True, {"comment": "replaced"}),
    ]
    schema = T.StructType(fields)
    empty = spark.createDataFrame([], schema)
    stored = stored_schema(schema)
    assert stored == encode_for_delta(empty).schema
    assert source_schema(stored) == decode_from_delta(spark.createDataFrame([], stored)).schema
    assert stored_schema(T.StructType(fields[:1])) == T.StructType(fields[:1])
    # a stored type the driver does not read back: Spark reads such a table
    other = T.StructType([T.StructField("x", T.StringType(), True, {"cdc_assets.type": "int"})])
    assert source_schema(other) is None
