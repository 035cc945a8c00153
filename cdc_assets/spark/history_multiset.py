"""The history of a keyless table: one version per occurrence of a row.

A keyless table is a multiset; a row's identity is its whole content, and two equal rows are
two occurrences. Per distinct row and transaction the changes' net count says how many
occurrences the transaction added (inserts and after images) or removed (deletes and before
images): each added one opens a version at the transaction, each removed one closes one of the
row's current versions, the oldest first (equal rows cannot be told apart otherwise; which one
closes changes no "as of" reading, only which interval a version shows).

A range is applied by one MERGE (:func:`.history_store.merge`) that deletes every current
version of each row the range touched and inserts its versions again, closed or current, with
those the range opened: the versions of the touched rows (few) are computed here, in the
driver, from the range's change rows and their current versions.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_assets.lsn import CHANGE_ORDER, OPERATION, START_LSN

from .asset_store import AssetStore
from .commit_metadata import Published
from .history_store import (
    COMMIT_TIME,
    END_AT,
    END_LSN_COLUMN,
    HAS_CONTENT,
    IS_CURRENT,
    START_AT,
    START_LSN_COLUMN,
    current_versions,
    merge,
)
from .mirror_merge import BEFORE_IMAGE, DELETE, after
from .spark_sql_names import sql_name
from .stored_columns import decode_from_delta

MISSING_VERSION = "keyless history: the changes remove a row the history has no current version of"


def _identity(row: Sequence[Any]) -> tuple[Any, ...]:
    """A row's content as a dict key (binary values as bytes)."""
    return tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)


def apply_changes(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: DataFrame,
    *,
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published:
    """Apply the change rows ``changes`` (after ``after_lsn``) to the keyless history at
    ``key_path`` in one MERGE committed with ``properties``."""
    uri = store.location(key_path)
    history = decode_from_delta(spark.read.format("delta").load(uri))
    validity = {START_LSN_COLUMN, END_LSN_COLUMN, START_AT, END_AT, IS_CURRENT}
    fields = [f for f in history.schema.fields if f.name not in validity]
    columns = [f.name for f in fields]
    cols = [F.col(sql_name(c)) for c in columns]
    relevant = after(changes, after_lsn).select(
        *cols,
        *[F.col(sql_name(c)) for c in CHANGE_ORDER if c not in columns],
        F.col(sql_name(COMMIT_TIME)),
    )
    rows = relevant.collect()
    # per distinct row, per transaction (in LSN order): the net count and the commit time
    net: dict[tuple[Any, ...], dict[bytes, list[Any]]] = defaultdict(dict)
    content: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        values = tuple(row[c] for c in columns)
        identity = _identity(values)
        content.setdefault(identity, values)
        lsn = bytes(row[START_LSN])
        sign = -1 if row[OPERATION] in (DELETE, BEFORE_IMAGE) else 1
        entry = net[identity].setdefault(lsn, [0, row[COMMIT_TIME]])
        entry[0] += sign
    touched = spark.createDataFrame(list(content.values()), T.StructType(fields))
    current = current_versions(spark, uri)
    held = current.join(touched, on=_null_safe(current, touched, columns), how="left_semi")
    open_versions: dict[tuple[Any, ...], deque[tuple[bytes, Any]]] = defaultdict(deque)
    for row in sorted(held.collect(), key=lambda r: bytes(r[START_LSN_COLUMN])):
        identity = _identity(tuple(row[c] for c in columns))
        open_versions[identity].append((bytes(row[START_LSN_COLUMN]), row[START_AT]))
    versions: list[tuple[Any, ...]] = []
    for identity, transactions in net.items():
        queue = open_versions[identity]
        for lsn in sorted(transactions):
            count, at = transactions[lsn]
            for _ in range(count):
                queue.append((lsn, at))
            for _ in range(-count):
                if not queue:
                    raise ValueError(f"{MISSING_VERSION} (at {lsn.hex()})")
                start, start_at = queue.popleft()
                versions.append((*content[identity], start, lsn, start_at, at, False))
        versions.extend((*content[identity], s, None, a, None, True) for s, a in queue)
    schema = T.StructType(
        [
            *fields,
            T.StructField(START_LSN_COLUMN, T.BinaryType()),
            T.StructField(END_LSN_COLUMN, T.BinaryType()),
            T.StructField(START_AT, T.TimestampNTZType()),
            T.StructField(END_AT, T.TimestampNTZType()),
            T.StructField(IS_CURRENT, T.BooleanType()),
        ]
    )
    opens = spark.createDataFrame(versions, schema)
    closes = spark.createDataFrame([], T.StructType(fields)).select(
        *cols,
        F.lit(None).cast("binary").alias(END_LSN_COLUMN),
        F.lit(None).cast(T.TimestampNTZType()).alias(END_AT),
        F.lit(False).alias(HAS_CONTENT),
    )
    return merge(spark, store, key_path, closes, opens, columns, properties, None, drops=touched)


def _null_safe(a: DataFrame, b: DataFrame, columns: Sequence[str]) -> list[Any]:
    return [a[sql_name(c)].eqNullSafe(b[sql_name(c)]) for c in columns]
