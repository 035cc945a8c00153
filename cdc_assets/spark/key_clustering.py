"""Large mirrors clustered by key, so that a MERGE of a few changes reads a few files.

A Delta MERGE first finds the target files that hold a key of its source: without help it reads
the whole table (a one-row change into a 10M-row mirror scanned 10M rows). Two things let Delta
skip files instead, using the min/max statistics it keeps per file and column:

- the mirror's rebuild from a snapshot is written range-partitioned and sorted by its key, in
  files of about :data:`ROWS_PER_FILE` rows, so each file holds one narrow key range;
- the MERGE's ``ON`` clause gets a condition on each of the target's key columns — the
  source's values of it as equalities joined by ``OR`` (at most :data:`KEY_LIST_MAX` keys;
  Delta's data skipping does not use an ``IN`` list), else their ``BETWEEN`` range — which Delta
  uses to prune files before it joins (``filterFiles`` with the condition's target-only
  predicates). A later key column matters when the first has few values (a tenant, a company
  code): every file then holds the same first value. The condition holds for every target row
  whose key is in the source, so matches and inserts are unchanged.

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

from .spark_sql_names import sql_name, sql_string

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


def target_key_condition(source: DataFrame, columns: Sequence[str], alias: str = "t") -> str | None:
    """A condition on the target's key ``columns`` (as stored) that every target row matching a
    source row meets: for each column, the source's values of it as equalities joined by ``OR``,
    or their range, the columns' conditions joined by ``AND`` (a later key column prunes the
    files of a first one with few values, such as a tenant); a column whose values have no
    literal form here is left out, None when none is left (no file skipping then). One Spark
    job for the source's keys (two for more than :data:`KEY_LIST_MAX` distinct keys)."""
    names = [sql_name(c) for c in columns]
    keys = source.select(*names).distinct()
    rows = keys.limit(KEY_LIST_MAX + 1).collect()
    if len(rows) <= KEY_LIST_MAX:
        parts = [
            _values_condition(f"{alias}.{name}", [r[i] for r in rows], source.schema[c].dataType)
            for i, (c, name) in enumerate(zip(columns, names, strict=True))
        ]
    else:
        bounds = source.agg(*(f(n) for n in names for f in (F.min, F.max))).collect()[0]
        parts = [
            _range_condition(
                f"{alias}.{name}", bounds[2 * i], bounds[2 * i + 1], source.schema[c].dataType
            )
            for i, (c, name) in enumerate(zip(columns, names, strict=True))
        ]
    if "FALSE" in parts:
        return "FALSE"  # nothing can match (a key column is NULL in every source row): inserts
    kept = [part for part in parts if part is not None]
    return " AND ".join(kept) if kept else None


def _values_condition(target: str, values: list[Any], data_type: T.DataType) -> str | None:
    """``target`` equals one of ``values`` (NULLs never match ``=``)."""
    present = {v for v in values if v is not None}
    if not present:
        return "FALSE"
    literals = [sql_literal(v, data_type) for v in present]
    if any(lit is None for lit in literals):
        return None
    return "(" + " OR ".join(f"{target} = {lit}" for lit in sorted(map(str, literals))) + ")"


def _range_condition(target: str, low: Any, high: Any, data_type: T.DataType) -> str | None:
    """``target`` within [low, high] (the source's min and max of it; both None: all NULL)."""
    if low is None and high is None:
        return "FALSE"
    bounds = sql_literal(low, data_type), sql_literal(high, data_type)
    if bounds[0] is None or bounds[1] is None:
        return None
    return f"{target} BETWEEN {bounds[0]} AND {bounds[1]}"
