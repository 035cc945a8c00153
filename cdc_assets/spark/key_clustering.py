"""Large mirrors clustered by key, so that a MERGE of a few changes reads a few files.

A Delta MERGE first finds the target files that hold a key of its source: without help it reads
the whole table (a one-row change into a 10M-row mirror scanned 10M rows). Two things let Delta
skip files instead, using the min/max statistics it keeps per file and column:

- the mirror's rebuild from a snapshot is written range-partitioned and sorted by its key, in
  files of about :data:`ROWS_PER_FILE` rows, so each file holds one narrow key range;
- the MERGE's ``ON`` clause gets a condition on the target's first key column alone — the
  source's keys as equalities joined by ``OR`` (at most :data:`KEY_LIST_MAX`; Delta's data
  skipping does not use an ``IN`` list), else their ``BETWEEN`` range — which Delta uses to
  prune files before it joins (``filterFiles`` with the condition's target-only predicates). The
  condition holds for every target row whose key is in the source, so matches and inserts are
  unchanged.

Small mirrors (one file or a few) get neither: no sampling job for the range partitioning, no
job to collect keys. Rows a MERGE inserts go to new files of their own (narrow when the keys are
new and ascending, as identity keys are).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .asset_store import sql_name, sql_string

ROWS_PER_FILE = 100_000  # a clustered mirror's rows per file: what a MERGE reads per key
KEY_LIST_MAX = 100  # more distinct keys than this: a BETWEEN range instead of equalities

_INTEGER_SUFFIX = {T.ByteType: "Y", T.ShortType: "S", T.IntegerType: "", T.LongType: "L"}


def is_large(rows: int | None) -> bool:
    """Whether a mirror of ``rows`` rows is worth clustering and key conditions."""
    return rows is not None and rows > ROWS_PER_FILE


def clustered(df: DataFrame, key_columns: Sequence[str], rows: int) -> DataFrame:
    """``df`` in files of about :data:`ROWS_PER_FILE` rows, each a key range, sorted by key."""
    files = max(1, math.ceil(rows / ROWS_PER_FILE))
    keys = [F.col(sql_name(k)) for k in key_columns]
    return df.repartitionByRange(files, *keys).sortWithinPartitions(*keys)


def sql_literal(value: Any, data_type: T.DataType) -> str | None:
    """``value`` as a Spark SQL literal of exactly ``data_type`` (no cast, so Delta's data
    skipping can compare it with the column's statistics); None for a type not handled."""
    if value is None:
        return None
    for kind, suffix in _INTEGER_SUFFIX.items():
        if isinstance(data_type, kind):
            return f"{int(value)}{suffix}"
    if isinstance(data_type, T.StringType) and isinstance(value, str):
        return sql_string(value)
    if isinstance(data_type, T.DateType) and isinstance(value, dt.date):
        return f"DATE'{value.isoformat()}'"
    if isinstance(data_type, T.TimestampNTZType) and isinstance(value, dt.datetime):
        return f"TIMESTAMP_NTZ'{value.isoformat(sep=' ')}'"
    if isinstance(data_type, T.BinaryType) and isinstance(value, bytes | bytearray):
        return f"X'{bytes(value).hex()}'"
    if isinstance(data_type, T.DecimalType) and isinstance(value, decimal.Decimal):
        # a bare decimal literal has the precision of its digits, not the column's, and the
        # cast Spark would add to the column hides it from data skipping; a literal cast to the
        # column's type is folded into a literal of exactly that type
        if not value.is_finite():
            return None
        return f"CAST('{value:f}' AS DECIMAL({data_type.precision},{data_type.scale}))"
    # floating point and the rest: no exact literal of the column's type here
    return None


def target_key_condition(source: DataFrame, column: str, alias: str = "t") -> str | None:
    """A condition on ``alias.column`` (the target's first key column, as stored) that every
    target row matching a source row meets: the source's values of it as equalities joined by
    ``OR``, or their range; None when a value has no literal form here (no file skipping then).
    One Spark job (two for more than :data:`KEY_LIST_MAX` distinct keys)."""
    data_type = source.schema[column].dataType
    target = f"{alias}.{sql_name(column)}"
    keys = source.select(sql_name(column)).where(F.col(sql_name(column)).isNotNull()).distinct()
    values = [row[0] for row in keys.limit(KEY_LIST_MAX + 1).collect()]
    if not values:
        return "FALSE"  # nothing can match: every source row is an insert
    if len(values) <= KEY_LIST_MAX:
        literals = [sql_literal(v, data_type) for v in values]
        if any(lit is None for lit in literals):
            return None
        return "(" + " OR ".join(f"{target} = {lit}" for lit in sorted(map(str, literals))) + ")"
    low, high = source.agg(F.min(sql_name(column)), F.max(sql_name(column))).collect()[0]
    bounds = sql_literal(low, data_type), sql_literal(high, data_type)
    if bounds[0] is None or bounds[1] is None:
        return None
    return f"{target} BETWEEN {bounds[0]} AND {bounds[1]}"
