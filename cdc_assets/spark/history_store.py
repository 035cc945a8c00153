"""A table's history (SCD type 2) as a Delta table, kept in step with its mirror range by range.

The history holds the table's columns and each version's validity:

- ``__start_lsn`` / ``__end_lsn``: the commit LSN of the transaction that made the version, and
  of the one that ended it (null while it is current);
- ``__start_at`` / ``__end_at``: their commit times (``cdc.lsn_time_mapping``'s
  ``tran_end_time``, server local time, as the change log's ``__$commit_time`` has them);
- ``__is_current``.

One version per key per transaction that changed it: inside one transaction only the key's
last state counts (:func:`transactions`). A delete closes the current version and opens none;
a re-insert opens a new one; a key update (delete of the old key, insert of the new) closes the
old key's version and opens the new key's. Keyless tables (a row's identity is its whole
content) are handled by :mod:`.history_multiset`.

A range is applied by one ``MERGE`` (:func:`apply_changes`) whose source has, per changed key,
one ``close`` row (matched to the key's current version: its end set; with
``track_history_columns``, its other columns updated in place) and the versions the range opens
(never matched: inserted). The table is not rewritten: with deletion vectors, bytes written
follow the changes. A snapshot opens the table's versions at the snapshot LSN
(:func:`rebase`): a new history is written whole; an existing one (a re-snapshot) gets a MERGE
that closes the versions of rows that vanished or differ and opens the rows that differ, so the
history before the snapshot stays. Each commit's ``userMetadata`` records the LSN the history
reached and the snapshot it is built on (:func:`position_of`): a range already applied is not
applied again. :func:`history_as_of` reads the table as of an LSN or a commit time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_assets.lsn import CHANGE_ORDER, OPERATION, START_LSN, Lsn

from .asset_store import AssetStore
from .commit_metadata import Published, without_user_metadata
from .concurrent_commits import retry_conflicts
from .key_clustering import clustered, is_large, target_key_condition
from .mirror_merge import BEFORE_IMAGE, DELETE, after
from .spark_merges import run_merge
from .spark_sql_names import sql_name
from .stored_columns import decode_from_delta, encode_for_delta, stored_name

START_LSN_COLUMN = "__start_lsn"
END_LSN_COLUMN = "__end_lsn"
START_AT = "__start_at"
END_AT = "__end_at"
IS_CURRENT = "__is_current"
VALIDITY_COLUMNS = (START_LSN_COLUMN, END_LSN_COLUMN, START_AT, END_AT, IS_CURRENT)
COMMIT_TIME = "__$commit_time"  # the change log's column: the change's commit time
HISTORY_TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
}
LSN = "lsn"  # the property holding the LSN a history commit reached (Lsn.hex)
SNAPSHOT_VERSION = "snapshot_version"  # ... the write id of the snapshot it is built on
ACTION = "__cdc_action"  # the MERGE source's: close a current version, or open one
CLOSE, OPEN, DROP = "c", "o", "d"  # DROP: every current version of a keyless row goes
HAS_CONTENT = "__cdc_has_content"  # a close row that also updates the version in place
_GROUP = "__cdc_group"
_G_START = "__cdc_group_start"
_NEXT = "__cdc_next"


@dataclass(frozen=True)
class HistoryPosition:
    """Where a history is: the LSN its last commit reached and the snapshot it is built on."""

    lsn: Lsn
    snapshot_version: str | None


def position_of(properties: Mapping[str, Any] | None) -> HistoryPosition | None:
    """The position a history commit recorded in its ``userMetadata``; None for none."""
    if not properties or not properties.get(LSN):
        return None
    return HistoryPosition(Lsn.parse(properties[LSN]), properties.get(SNAPSHOT_VERSION))


def position_properties(position: HistoryPosition) -> dict[str, Any]:
    return {LSN: position.lsn.hex, SNAPSHOT_VERSION: position.snapshot_version}


def _col(name: str) -> Column:
    return F.col(sql_name(name))


def _s(name: str) -> str:
    """The stored column name, quoted for SQL."""
    return sql_name(stored_name(name))


def _validity(start: Column, start_at: Column, end: Column, end_at: Column) -> list[Column]:
    return [
        start.cast("binary").alias(START_LSN_COLUMN),
        end.cast("binary").alias(END_LSN_COLUMN),
        start_at.cast(T.TimestampNTZType()).alias(START_AT),
        end_at.cast(T.TimestampNTZType()).alias(END_AT),
        end.isNull().alias(IS_CURRENT),
    ]


def transactions(
    changes: DataFrame, key_columns: Sequence[str], after_lsn: bytes | None
) -> DataFrame:
    """Per key and transaction (``__$start_lsn``) the key's last change in it, by SQL Server's
    order (before images left out): what the key looked like when the transaction committed
    (``__$operation`` 1: it was gone)."""
    relevant = after(changes, after_lsn).where(_col(OPERATION) != BEFORE_IMAGE)
    keys = [_col(k) for k in key_columns]
    per_transaction = Window.partitionBy(*keys, _col(START_LSN)).orderBy(
        *[_col(c).desc() for c in CHANGE_ORDER]
    )
    return (
        relevant.withColumn("__rank", F.row_number().over(per_transaction))
        .where(F.col("__rank") == 1)
        .drop("__rank")
    )


def _versions(
    last: DataFrame,
    key_columns: Sequence[str],
    columns: Sequence[str],
    current: DataFrame | None,
    tracked: Sequence[str] | None,
) -> tuple[DataFrame, DataFrame]:
    """The ``(closes, opens)`` of a MERGE from ``last`` (:func:`transactions`). With
    ``tracked`` columns, a transaction that changed none of them (against the key's previous
    state: the range's previous transaction, else its ``current`` version) is no version: its
    values go into the version it belongs to (in place)."""
    keys = [_col(k) for k in key_columns]
    by_key = Window.partitionBy(*keys).orderBy(_col(START_LSN))
    if tracked:
        assert current is not None
        held = current.select(
            *keys, F.lit(True).alias("__held"), *[_col(c).alias(f"__held_{c}") for c in tracked]
        )
        last = last.join(held, on=list(key_columns), how="left")
        same_as_held = F.lit(True)
        same_as_previous = F.lit(True)
        for c in tracked:
            same_as_held = same_as_held & _col(c).eqNullSafe(F.col(sql_name(f"__held_{c}")))
            same_as_previous = same_as_previous & _col(c).eqNullSafe(F.lag(_col(c)).over(by_key))
        first = F.lag(_col(START_LSN)).over(by_key).isNull()
        in_place = (_col(OPERATION) != DELETE) & F.when(
            first, F.coalesce(F.col("__held"), F.lit(False)) & same_as_held
        ).otherwise((F.lag(_col(OPERATION)).over(by_key) != DELETE) & same_as_previous)
    else:
        in_place = F.lit(False)
    running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    grouped = last.withColumn("__in_place", in_place).withColumn(
        _GROUP, F.sum(F.when(F.col("__in_place"), 0).otherwise(1)).over(running)
    )
    group = Window.partitionBy(*keys, F.col(_GROUP))
    newest_first = group.orderBy(_col(START_LSN).desc())
    groups = (
        grouped.withColumn(
            _G_START, F.min(F.struct(_col(START_LSN), _col(COMMIT_TIME))).over(group)
        )
        .withColumn("__rank", F.row_number().over(newest_first))
        .where(F.col("__rank") == 1)
    )
    by_group = Window.partitionBy(*keys).orderBy(F.col(_GROUP))
    groups = groups.withColumn(_NEXT, F.lead(F.col(_G_START)).over(by_group))
    content = [_col(c) for c in columns]
    opens = groups.where((F.col(_GROUP) >= 1) & (_col(OPERATION) != DELETE)).select(
        *content,
        *_validity(
            F.col(_G_START).getField(START_LSN),
            F.col(_G_START).getField(COMMIT_TIME),
            F.col(_NEXT).getField(START_LSN),
            F.col(_NEXT).getField(COMMIT_TIME),
        ),
    )
    # the key's current version: updated in place by group 0 (if any), closed where the first
    # version of the range starts
    first_group = Window.partitionBy(*keys).orderBy(F.col(_GROUP))
    existing = groups.withColumn("__first", F.row_number().over(first_group)).where(
        F.col("__first") == 1
    )
    updated = F.col(_GROUP) == 0
    end = F.when(updated, F.col(_NEXT)).otherwise(F.col(_G_START))
    closes = existing.select(
        *[_col(c) if c in key_columns else F.when(updated, _col(c)).alias(c) for c in columns],
        end.getField(START_LSN).cast("binary").alias(END_LSN_COLUMN),
        end.getField(COMMIT_TIME).cast(T.TimestampNTZType()).alias(END_AT),
        updated.alias(HAS_CONTENT),
    )
    return closes, opens


def data_columns(spark: SparkSession, uri: str) -> list[str]:
    """The history's table columns (as the source names them), without the validity ones."""
    found = decode_from_delta(spark.read.format("delta").load(uri)).columns
    return [c for c in found if c not in VALIDITY_COLUMNS]


def with_history_columns(spark: SparkSession, uri: str, changes: DataFrame) -> DataFrame:
    """``changes`` with the history's columns they lack (one a later capture instance
    dropped: kept by the history, null from then on)."""
    history = decode_from_delta(spark.read.format("delta").load(uri)).schema
    for field in history:
        if field.name not in VALIDITY_COLUMNS and field.name not in changes.columns:
            changes = changes.withColumn(field.name, F.lit(None).cast(field.dataType))
    return changes


def current_versions(spark: SparkSession, uri: str) -> DataFrame:
    history = decode_from_delta(spark.read.format("delta").load(uri))
    return history.where(F.col(IS_CURRENT))


def apply_changes(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: DataFrame,
    *,
    key_columns: Sequence[str],
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
    tracked: Sequence[str] | None = None,
    history_rows: int | None = None,
) -> Published:
    """Apply the change rows ``changes`` (after ``after_lsn``) to the keyed history at
    ``key_path`` in one MERGE committed with ``properties``. ``history_rows``: about how many
    rows the history has (a large one's MERGE names the changed keys, so Delta skips the files
    that cannot hold them)."""
    uri = store.location(key_path)
    columns = data_columns(spark, uri)
    last = transactions(with_history_columns(spark, uri, changes), key_columns, after_lsn)
    current = None
    if tracked:
        touched = last.select(*[_col(k) for k in key_columns]).distinct()
        current = current_versions(spark, uri).join(touched, on=list(key_columns), how="left_semi")
    closes, opens = _versions(last, key_columns, columns, current, tracked)
    return merge(spark, store, key_path, closes, opens, key_columns, properties, history_rows)


def rebase(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    state: DataFrame,
    *,
    at: Lsn,
    at_time: dt.datetime | None,
    key_columns: Sequence[str],
    properties: Mapping[str, Any],
    estimated_rows: int | None = None,
) -> Published:
    """The history at ``key_path`` built on ``state``, the table as of ``at`` (a snapshot LSN,
    ``at_time`` the commit time of the last transaction at or before it): a new history is
    ``state``'s rows, each a version opened at ``at``; an existing one keeps its versions, and
    one MERGE closes at ``at`` the current versions of rows that vanished or differ and opens
    the rows that differ (keyless: the rows whose number of copies changed are closed and
    opened again as many times as they now occur)."""
    lsn = F.lit(bytearray(at.raw))
    when = F.lit(at_time)
    nothing = F.lit(None)

    def opened_from(state: DataFrame) -> DataFrame:
        validity = _validity(lsn, when, nothing.cast("binary"), nothing)
        return state.select(*[_col(c) for c in state.columns], *validity)

    opened = opened_from(state)
    if store.delta_table(key_path) is None:
        # a large keyed history is clustered by key as a mirror is (``estimated_rows``), so a
        # range's MERGE reads only the files that may hold its keys
        large = bool(key_columns) and is_large(estimated_rows)
        if large:
            assert estimated_rows is not None
            opened = clustered(opened, key_columns, estimated_rows)
        return store.write(
            spark,
            opened,
            key_path,
            None,
            lambda written: {**properties, "rows": written.count()},
            table_properties=HISTORY_TABLE_PROPERTIES,
            keep_layout=large,
        )
    uri = store.location(key_path)
    state = _with_columns_of_both(spark, uri, state)
    columns = data_columns(spark, uri)
    opened = opened_from(state)
    current = current_versions(spark, uri).select(*[_col(c) for c in columns])
    identity = list(key_columns) or columns
    if key_columns:  # the keys whose current version is the row the snapshot has
        unchanged = state.join(current, on=_same(state, current, columns), how="left_semi")
        unchanged = unchanged.select(*[_col(c) for c in identity])
    else:  # a multiset: the rows held as many times as the snapshot has them
        now = state.groupBy(*[_col(c) for c in columns]).count()
        held = current.groupBy(*[_col(c) for c in columns]).count()
        same = [*_same(now, held, columns), now["count"] == held["count"]]
        unchanged = now.join(held, on=same, how="left_semi").drop("count")
    gone_or_changed = current.join(
        unchanged, on=_same(current, unchanged, identity), how="left_anti"
    )
    closes = (
        gone_or_changed.select(*[_col(c) for c in identity])
        .distinct()
        .select(
            *[_col(c) if c in identity else F.lit(None).alias(c) for c in columns],
            lsn.cast("binary").alias(END_LSN_COLUMN),
            when.cast(T.TimestampNTZType()).alias(END_AT),
            F.lit(False).alias(HAS_CONTENT),
        )
    )
    opens = opened.join(unchanged, on=_same(opened, unchanged, identity), how="left_anti")
    return merge(spark, store, key_path, closes, opens, identity, properties, None)


def _with_columns_of_both(spark: SparkSession, uri: str, state: DataFrame) -> DataFrame:
    """Before a rebase on ``state`` (a new snapshot, maybe of a new capture instance): the
    history takes the columns ``state`` has and it lacks (null in its versions so far: one
    commit that adds them to its schema, no file written), a column whose type ``state``
    changed takes the new type (its versions so far rewritten with their values converted,
    null where they do not convert: a column rule changed its stored type), and ``state`` the
    columns only the history has (null: a column the new instance dropped stays, empty from
    now on). ``state`` so returned."""
    held = {f.name: f for f in decode_from_delta(spark.read.format("delta").load(uri)).schema}
    held = {n: f for n, f in held.items() if n not in VALIDITY_COLUMNS}
    wanted = {f.name: f for f in state.schema}
    added = [n for n in wanted if n not in held]
    retyped = [n for n in wanted if n in held and held[n].dataType != wanted[n].dataType]
    stored = encode_for_delta(state).schema
    if retyped:
        raw = spark.read.format("delta").load(uri)
        for name in retyped:
            field = stored[stored_name(name)]
            raw = raw.withColumn(
                field.name,
                F.col(sql_name(field.name))
                .cast(field.dataType)
                .alias(field.name, metadata=field.metadata),
            )
        with without_user_metadata(spark):
            retry_conflicts(
                lambda: (
                    raw.localCheckpoint()
                    .write.format("delta")
                    .mode("overwrite")
                    .option("overwriteSchema", "true")
                    .save(uri)
                ),
                f"changing the column types of {uri}",
            )
    if added:
        new_columns = encode_for_delta(state.select(*[_col(n) for n in added])).limit(0)
        with without_user_metadata(spark):
            retry_conflicts(
                lambda: (
                    new_columns.write.format("delta")
                    .mode("append")
                    .option("mergeSchema", "true")
                    .save(uri)
                ),
                f"adding columns to {uri}",
            )
    for name, field in held.items():
        if name not in wanted:
            state = state.withColumn(name, F.lit(None).cast(field.dataType))
    return state


def _same(a: DataFrame, b: DataFrame, columns: Sequence[str]) -> list[Column]:
    """``a`` and ``b`` equal in ``columns`` (nulls equal to nulls)."""
    return [a[sql_name(c)].eqNullSafe(b[sql_name(c)]) for c in columns]


def merge(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    closes: DataFrame,
    opens: DataFrame,
    identity: Sequence[str],
    properties: Mapping[str, Any],
    history_rows: int | None,
    drops: DataFrame | None = None,
) -> Published:
    """One MERGE: each ``closes`` row ends (and, with ``HAS_CONTENT``, updates) the current
    version of its ``identity`` (the key; all columns for a keyless table); each ``drops`` row
    (a keyless table's, its columns only) deletes every current version of its row; ``opens``
    are inserted."""
    uri = store.location(key_path)
    columns = data_columns(spark, uri)
    closes = closes.withColumn("__drop", F.lit(False))
    if drops is not None:
        closes = closes.unionByName(
            drops.select(
                *[_col(c) for c in columns],
                F.lit(None).cast("binary").alias(END_LSN_COLUMN),
                F.lit(None).cast(T.TimestampNTZType()).alias(END_AT),
                F.lit(False).alias(HAS_CONTENT),
            ).withColumn("__drop", F.lit(True))
        )
    action = F.when(F.col("__drop"), F.lit(DROP)).otherwise(F.lit(CLOSE))
    source = encode_for_delta(
        closes.select(
            *[_col(c) for c in columns],
            F.lit(None).cast("binary").alias(START_LSN_COLUMN),
            F.col(END_LSN_COLUMN),
            F.lit(None).cast(T.TimestampNTZType()).alias(START_AT),
            F.col(END_AT),
            F.lit(None).cast("boolean").alias(IS_CURRENT),
            F.col(HAS_CONTENT),
            action.alias(ACTION),
        ).unionByName(
            opens.select(
                *[_col(c) for c in columns],
                *[F.col(c) for c in VALIDITY_COLUMNS],
                F.lit(False).alias(HAS_CONTENT),
                F.lit(OPEN).alias(ACTION),
            )
        )
    )
    on = f"s.{ACTION} IN ('{CLOSE}', '{DROP}') AND t.{IS_CURRENT} AND " + " AND ".join(
        f"t.{_s(k)} <=> s.{_s(k)}" for k in identity
    )
    if is_large(history_rows) and identity:
        skip = target_key_condition(source, [stored_name(k) for k in identity])
        on += f" AND {skip}" if skip else ""
    in_place = ", ".join(
        f"t.{_s(c)} = CASE WHEN s.{HAS_CONTENT} THEN s.{_s(c)} ELSE t.{_s(c)} END"
        for c in columns
        if c not in identity
    )
    names = ", ".join([*(_s(c) for c in columns), *VALIDITY_COLUMNS])
    values = ", ".join([*(f"s.{_s(c)}" for c in columns), *(f"s.{c}" for c in VALIDITY_COLUMNS)])
    statement = (
        f"MERGE INTO {{target}} t USING {{source}} s ON {on} "
        + (f"WHEN MATCHED AND s.{ACTION} = '{DROP}' THEN DELETE " if drops is not None else "")
        + f"WHEN MATCHED THEN UPDATE SET {in_place + ', ' if in_place else ''}"
        f"t.{END_LSN_COLUMN} = s.{END_LSN_COLUMN}, t.{END_AT} = s.{END_AT}, "
        f"t.{IS_CURRENT} = s.{END_LSN_COLUMN} IS NULL "
        f"WHEN NOT MATCHED AND s.{ACTION} = '{OPEN}' THEN INSERT ({names}) VALUES ({values})"
    )
    # a MERGE that changed nothing may make no commit: then the properties get one of their own
    return run_merge(spark, store, key_path, source, statement, properties)


def history_as_of(
    spark: SparkSession,
    path: str,
    *,
    lsn: Lsn | str | None = None,
    at: dt.datetime | None = None,
) -> DataFrame:
    """The table as it was at ``lsn`` (an :class:`~cdc_assets.lsn.Lsn` or text
    :meth:`Lsn.parse` accepts: after the transactions committed at or before it) or at the
    commit time ``at`` (server local time, naive: after the transactions committed at or before
    it), from the history at ``path``: the versions valid then, with the table's columns."""
    if (lsn is None) == (at is None):
        raise ValueError("history_as_of: give exactly one of lsn= or at=")
    history = decode_from_delta(spark.read.format("delta").load(path))
    if lsn is not None:
        point = F.lit(bytearray((lsn if isinstance(lsn, Lsn) else Lsn.parse(lsn)).raw))
        start, end = F.col(START_LSN_COLUMN), F.col(END_LSN_COLUMN)
    else:
        point = F.lit(at).cast(T.TimestampNTZType())
        start, end = F.col(START_AT), F.col(END_AT)
    valid = (start <= point) & (end.isNull() | (end > point))
    return history.where(valid).drop(*VALIDITY_COLUMNS)
