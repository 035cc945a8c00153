"""Applying change rows to a mirror in Spark: the current state of a table, merged incrementally.

Change rows carry ``__$start_lsn``, ``__$command_id``, ``__$seqval`` and ``__$operation``
(1 delete, 2 insert, 3 update before image, 4 update after image) and the captured columns. SQL
Server orders changes by (``__$start_lsn``, ``__$command_id``, ``__$seqval``, ``__$operation``,
:data:`cdc_assets.lsn.CHANGE_ORDER`); an
update of a key column arrives as delete + insert, so per key "the last change wins":

- keyed tables: the last change of each key decides — a delete drops the key, an insert or an
  after image sets the row. Keys the changes do not touch keep their mirror row, so the cost grows
  with the changes, not the table (one anti-join and one union, no recomputation from history).
  The same rule applied to an overlapping window is idempotent, which is what the fuzzy snapshot
  replay needs.
- keyless tables are multisets: a delete or before image removes one equal row, an insert or after
  image adds one; the net count per distinct row is added to the mirror's count.

Changes at or below the table's snapshot LSN are already in the snapshot and are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from cdc_assets.lsn import CHANGE_ORDER, OPERATION, START_LSN

from .spark_sql_names import column

DELETE, INSERT, BEFORE_IMAGE, AFTER_IMAGE = 1, 2, 3, 4
MISSING_ROW = "keyless merge: the changes remove a row the mirror does not hold"


def after(changes: DataFrame, snapshot_lsn: bytes | None) -> DataFrame:
    """Only the changes the snapshot does not already hold (``__$start_lsn`` > snapshot LSN)."""
    if snapshot_lsn is None:
        return changes
    return changes.where(column(START_LSN) > F.lit(bytearray(snapshot_lsn)))


def last_change_per_key(
    changes: DataFrame, key_columns: Sequence[str], snapshot_lsn: bytes | None = None
) -> DataFrame:
    """Per key, the last change after ``snapshot_lsn`` by SQL Server's order (before images
    left out): what a MERGE applies. ``__$operation`` 1 means the key is gone."""
    if not key_columns:
        raise ValueError("last_change_per_key needs key columns; keyless tables are multisets")
    relevant = after(changes, snapshot_lsn).where(column(OPERATION) != BEFORE_IMAGE)
    keys = [column(k) for k in key_columns]
    order = [column(c).desc() for c in CHANGE_ORDER]
    return (
        relevant.withColumn(
            "__rank", F.row_number().over(Window.partitionBy(*keys).orderBy(*order))
        )
        .where(F.col("__rank") == 1)
        .drop("__rank")
    )


def last_change_per_key_in_driver(
    changes: pa.Table, key_columns: Sequence[str], snapshot_lsn: bytes | None = None
) -> pa.Table:
    """:func:`last_change_per_key` of change rows held in the driver (Arrow): a small range's,
    merged without Spark (:func:`.driver_merges.driver_merge_keyed`)."""
    if not key_columns:
        raise ValueError("last_change_per_key needs key columns; keyless tables are multisets")
    last: dict[tuple[object, ...], int] = {}
    order = [changes.column(c).to_pylist() for c in CHANGE_ORDER]
    keys = [changes.column(k).to_pylist() for k in key_columns]
    starts, operations = order[0], order[3]
    # nulls first, as Spark's descending order puts them last
    ranked = sorted(
        range(changes.num_rows), key=lambda i: tuple((c[i] is not None, c[i]) for c in order)
    )
    for i in ranked:  # SQL Server's order: the last change of a key is its last one here
        if operations[i] == BEFORE_IMAGE:
            continue
        if snapshot_lsn is not None and not starts[i] > snapshot_lsn:
            continue
        last[tuple(col[i] for col in keys)] = i
    return changes.take(sorted(last.values()))


def last_changes_as(
    target: pa.Schema,
    changes: pa.Table,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None,
    action: str,
) -> pa.Table:
    """:func:`last_change_per_key_in_driver` in the columns and types of ``target`` (a column
    the changes lack: nulls), followed by the change's operation (int32) named ``action``: the
    source of a MERGE made in the driver."""
    last = last_change_per_key_in_driver(changes, key_columns, snapshot_lsn)
    present = set(last.column_names)
    arrays = [
        last.column(f.name).cast(f.type) if f.name in present else pa.nulls(last.num_rows, f.type)
        for f in target
    ]
    arrays.append(last.column(OPERATION).cast(pa.int32()))
    return pa.Table.from_arrays(arrays, schema=target.append(pa.field(action, pa.int32())))


NET = "__cdc_net"  # the net count column of :func:`net_counts_in_driver`


def net_counts_in_driver(
    target: pa.Schema, changes: pa.Table, snapshot_lsn: bytes | None = None
) -> pa.Table:
    """:func:`net_counts` of change rows held in the driver (Arrow), after ``snapshot_lsn``: per
    distinct row of ``target``'s columns (in its types; a column the changes lack: nulls; nulls
    equal to nulls) the net count, ``NET`` (int64), rows whose changes cancel out left out."""
    if snapshot_lsn is not None:
        starts = changes.column(START_LSN).to_pylist()
        changes = changes.filter(pa.array([s > snapshot_lsn for s in starts], pa.bool_()))
    removes = {DELETE, BEFORE_IMAGE}
    signs = [-1 if op in removes else 1 for op in changes.column(OPERATION).to_pylist()]
    present = set(changes.column_names)
    arrays = [
        changes.column(f.name).cast(f.type)
        if f.name in present
        else pa.nulls(changes.num_rows, f.type)
        for f in target
    ]
    arrays.append(pa.array(signs, pa.int64()))
    rows = pa.Table.from_arrays(arrays, schema=target.append(pa.field(NET, pa.int64())))
    counted = rows.group_by(target.names, use_threads=False).aggregate([(NET, "sum")])
    counted = counted.filter(pc.not_equal(counted.column(f"{NET}_sum"), 0))
    return counted.select(target.names).append_column(NET, counted.column(f"{NET}_sum"))


def net_counts(changes: DataFrame, data_columns: Sequence[str]) -> DataFrame:
    """Per distinct row of ``data_columns``, ``__n``: inserts and after images minus deletes and
    before images; rows whose changes cancel out are left out."""
    cols = [column(c) for c in data_columns]
    sign = F.when(column(OPERATION).isin(DELETE, BEFORE_IMAGE), F.lit(-1)).otherwise(F.lit(1))
    return (
        changes.select(*cols, sign.alias("__n"))
        .groupBy(*cols)
        .agg(F.sum("__n").alias("__n"))
        .where(F.col("__n") != 0)
    )


def rows_after_keyed_changes(
    mirror: DataFrame,
    changes: DataFrame,
    *,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None = None,
) -> DataFrame:
    """The mirror after ``changes``: last change per key by SQL Server's order, deletes dropped."""
    if not key_columns:
        raise ValueError(
            "rows_after_keyed_changes needs key columns; "
            "use rows_after_multiset_changes for keyless tables"
        )
    data_columns = mirror.columns
    keys = [column(k) for k in key_columns]
    last = last_change_per_key(changes, key_columns, snapshot_lsn)
    touched = last.select(*keys)
    kept = mirror.join(touched, on=list(key_columns), how="left_anti")
    upserts = last.where(column(OPERATION) != DELETE).select(*[column(c) for c in data_columns])
    return kept.unionByName(upserts)


def rows_after_multiset_changes(
    mirror: DataFrame, changes: DataFrame, *, snapshot_lsn: bytes | None = None
) -> DataFrame:
    """The keyless mirror after ``changes``: per distinct row, count + inserts - deletes."""
    data_columns = mirror.columns
    cols = [column(c) for c in data_columns]
    sign = F.when(column(OPERATION).isin(DELETE, BEFORE_IMAGE), F.lit(-1)).otherwise(F.lit(1))
    delta = after(changes, snapshot_lsn).select(*cols, sign.alias("__n"))
    current = mirror.select(*cols, F.lit(1).alias("__n"))
    counts = current.unionByName(delta).groupBy(*cols).agg(F.sum("__n").alias("__n"))
    # A negative count means the changes removed rows the mirror never had: refuse loudly.
    checked = counts.withColumn(
        "__n",
        F.when(F.col("__n") < 0, F.raise_error(F.lit(MISSING_ROW))).otherwise(F.col("__n")),
    )
    return (
        checked.where(F.col("__n") > 0)
        .withColumn("__copy", F.explode(F.array_repeat(F.lit(1), F.col("__n").cast("int"))))
        .select(*cols)
    )
