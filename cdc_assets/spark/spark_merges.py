"""Spark's ``MERGE INTO`` of a range into a mirror (keyed: the last change per key; keyless: the
affected distinct rows re-inserted with their new number of copies), committed with the
mirror's properties as its ``userMetadata`` (see :mod:`.mirror_store` for how a merge is chosen)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .asset_store import AssetStore
from .commit_metadata import (
    Published,
    merge_with_user_metadata,
    to_json,
    user_metadata,
    without_user_metadata,
)
from .concurrent_commits import retry_conflicts
from .key_clustering import is_large, target_key_condition
from .mirror_merge import (
    MISSING_ROW,
    OPERATION,
    after,
    last_change_per_key,
    net_counts,
)
from .mirror_versions import (
    LSN,
)
from .spark_sql_names import sql_name
from .stored_columns import decode_from_delta, encode_for_delta, stored_name

MIRROR_TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
}


ACTION = "_cdc_action"


COPIES = "_cdc_copies"


def target_columns(spark: SparkSession, uri: str) -> list[str]:
    """The mirror's column names as the source has them (not as stored)."""
    return decode_from_delta(spark.read.format("delta").load(uri)).columns


def stored_sql_name(name: str) -> str:
    """The stored column name, quoted for SQL."""
    return sql_name(stored_name(name))


def turn_on_mirror_properties(
    spark: SparkSession, store: AssetStore, key_path: Sequence[str]
) -> None:
    """Deletion vectors for a mirror that lacks them: one created small, by delta-rs (see
    :data:`.asset_store.DRIVER_WRITE_ROWS`), gets them before its first MERGE, so that its
    MERGEs write what changed however large it grows."""
    table = store.delta_table(key_path)
    configuration = table.metadata().configuration if table is not None else {}
    missing = {k: v for k, v in MIRROR_TABLE_PROPERTIES.items() if configuration.get(k) != v}
    if table is None or not missing:
        return
    settings = ", ".join(f"'{k}' = '{v}'" for k, v in missing.items())
    statement = f"ALTER TABLE delta.`{store.location(key_path)}` SET TBLPROPERTIES ({settings})"

    def alter() -> None:
        with without_user_metadata(spark) as session:
            session.sql(statement)

    retry_conflicts(alter, f"turning on {', '.join(missing)}")


def run_merge(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    source: DataFrame,
    statement: str,
    properties: Mapping,
) -> Published:
    """The MERGE, committed with ``properties``; a MERGE that changed nothing may make no
    commit, and then the properties get one of their own (:func:`_record`)."""
    turn_on_mirror_properties(spark, store, key_path)
    uri = store.location(key_path)
    text = to_json(properties)
    merge_with_user_metadata(spark, uri, source, statement, text)
    published = store.published(spark, uri, dict(properties))
    if published.user_metadata != text:
        _record(spark, uri, properties)
        published = store.published(spark, uri, dict(properties))
    return published


def _record(spark: SparkSession, uri: str, properties: Mapping[str, Any]) -> None:
    def alter() -> None:
        with user_metadata(spark, to_json(properties)) as session:
            session.sql(
                f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES "
                f"('cdc_assets.{LSN}' = '{properties.get(LSN, '')}')"
            )

    retry_conflicts(alter, f"recording the LSN of {uri}")


def row_count(spark: SparkSession, uri: str) -> int:
    return spark.read.format("delta").load(uri).count()


def spark_merge_keyed(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: DataFrame,
    *,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
    target_rows: int | None = None,
) -> Published:
    """Apply ``changes`` to the keyed mirror: the last change per key decides. ``target_rows``:
    the mirror's rows before, when known; a large mirror's MERGE gets a condition on its key
    columns that lets Delta skip the files no change touches (:mod:`.key_clustering`)."""
    uri = store.location(key_path)
    columns = target_columns(spark, uri)
    last = last_change_per_key(changes, key_columns, snapshot_lsn)
    present = set(last.columns)
    source = encode_for_delta(
        last.select(
            *[F.col(sql_name(c)) if c in present else F.lit(None).alias(c) for c in columns],
            F.col(sql_name(OPERATION)).alias(ACTION),
        )
    )
    on = " AND ".join(f"t.{stored_sql_name(k)} = s.{stored_sql_name(k)}" for k in key_columns)
    if is_large(target_rows):
        skip = target_key_condition(source, [stored_name(k) for k in key_columns])
        on += f" AND {skip}" if skip else ""
    sets = ", ".join(
        f"t.{stored_sql_name(c)} = s.{stored_sql_name(c)}" for c in columns if c not in key_columns
    )
    names = ", ".join(stored_sql_name(c) for c in columns)
    values = ", ".join(f"s.{stored_sql_name(c)}" for c in columns)
    statement = (
        f"MERGE INTO {{target}} t USING {{source}} s ON {on} "
        f"WHEN MATCHED AND s.{ACTION} = 1 THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {sets} " if sets else "")
        + f"WHEN NOT MATCHED AND s.{ACTION} <> 1 THEN INSERT ({names}) VALUES ({values})"
    )
    return run_merge(spark, store, key_path, source, statement, properties)


def spark_merge_multiset(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: DataFrame,
    *,
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published:
    """Apply ``changes`` to the keyless mirror: the distinct rows they touch are deleted and
    inserted again as many times as they now occur (an error if a count would go negative)."""
    uri = store.location(key_path)
    mirror = decode_from_delta(spark.read.format("delta").load(uri))
    columns = mirror.columns
    net = net_counts(after(changes, snapshot_lsn), columns)  # columns + __n, n != 0
    held = mirror.join(
        net.select(*[F.col(sql_name(c)) for c in columns]),
        on=[mirror[sql_name(c)].eqNullSafe(net[sql_name(c)]) for c in columns],
        how="left_semi",
    )
    counts = held.groupBy(*[F.col(sql_name(c)) for c in columns]).agg(
        F.count(F.lit(1)).alias("__m")
    )
    joined = net.join(
        counts,
        on=[net[sql_name(c)].eqNullSafe(counts[sql_name(c)]) for c in columns],
        how="left",
    ).select(
        *[net[sql_name(c)] for c in columns],
        (F.coalesce(F.col("__m"), F.lit(0)) + F.col("__n")).alias(COPIES),
    )
    checked = joined.withColumn(
        COPIES,
        F.when(F.col(COPIES) < 0, F.raise_error(F.lit(MISSING_ROW))).otherwise(F.col(COPIES)),
    )
    deletes = checked.select(*[F.col(sql_name(c)) for c in columns], F.lit("d").alias(ACTION))
    inserts = (
        checked.where(F.col(COPIES) > 0)
        .withColumn("__copy", F.explode(F.array_repeat(F.lit(1), F.col(COPIES).cast("int"))))
        .select(*[F.col(sql_name(c)) for c in columns], F.lit("i").alias(ACTION))
    )
    source = encode_for_delta(deletes.unionByName(inserts))
    on = " AND ".join(f"t.{stored_sql_name(c)} <=> s.{stored_sql_name(c)}" for c in columns)
    names = ", ".join(stored_sql_name(c) for c in columns)
    values = ", ".join(f"s.{stored_sql_name(c)}" for c in columns)
    statement = (
        f"MERGE INTO {{target}} t USING {{source}} s ON s.{ACTION} = 'd' AND {on} "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.{ACTION} = 'i' THEN INSERT ({names}) VALUES ({values})"
    )
    return run_merge(spark, store, key_path, source, statement, properties)
