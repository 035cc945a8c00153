"""Change rows as a capture instance's change table holds them, built in a test."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import Lsn

CHANGE_COLUMNS = (
    "`__$start_lsn` binary, `__$command_id` int, `__$seqval` binary, `__$operation` int"
)


def lsn(n: int) -> bytearray:
    return bytearray(Lsn.from_int(n).raw)


def change_rows(spark: SparkSession, rows: list[tuple], data: str) -> DataFrame:
    """``rows`` of (start LSN, seqval, operation, *values) over the columns ``data``."""
    full = [(lsn(start), 1, lsn(seq), op, *values) for start, seq, op, *values in rows]
    return spark.createDataFrame(full, f"{CHANGE_COLUMNS}, {data}")


def sorted_rows(df: DataFrame) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)
