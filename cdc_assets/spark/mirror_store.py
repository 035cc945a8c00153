"""Mirrors as Delta tables, updated in place with ``MERGE INTO``; :func:`apply` chooses how.

A mirror is one Delta table with deletion vectors (a MERGE marks the rows it removes instead of
rewriting their files, so bytes written grow with the changes, not the table; a mirror created
small, by delta-rs, gets them at its first Spark MERGE) and Change Data Feed (downstream assets
can read only what changed: ``readChangeFeed``). A small range is merged in the driver instead
(:func:`driver_merge_keyed`): into a small mirror by delta-rs, without deletion vectors
(rewriting its few files costs less than Spark's jobs), into a large one with deletion vectors
written in the driver (:mod:`.merge_with_deletion_vectors`), whatever its columns (those stored
otherwise, :mod:`.stored_columns`, are written as Spark writes them). :func:`apply` is the one
place that chooses between a rebuild from a snapshot, a merge in the driver and Spark's MERGE,
with the thresholds (:data:`DRIVER_MERGE_ROWS`, :data:`DRIVER_WRITE_ROWS`): the mirror asset and
the mirror benchmark call it. Each commit's
``userMetadata`` holds the mirror's properties, among them the LSN it reached, so the data and
its LSN are one commit; the table's history maps each LSN the mirror reached to a Delta version,
which :func:`read_mirror_as_of` uses.

- keyed tables: the range's last change per key (:func:`.mirror_merge.last_change_per_key`) is
  merged: a delete removes the key, an insert or after image inserts or updates the row.
- keyless tables are multisets: per distinct row the changes add or remove copies. The affected
  distinct rows are deleted and re-inserted with their new number of copies, in one MERGE; a
  small range in the driver (:func:`driver_merge_multiset`), with deletion vectors.

The merge is SQL (``MERGE INTO delta.`<uri>```) on a temporary view, which also works over
Spark Connect (Delta's Python ``DeltaTable`` API does not). ``userMetadata`` of a MERGE can only
be given as a session conf: each MERGE runs in a session of its own (``newSession``), its source
a global temporary view, so threads can merge different tables at once; over Spark Connect,
which has no ``newSession``, merges of one process take turns
(:func:`.commit_metadata.user_metadata`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import Lsn
from cdc_assets.records import MirrorPosition

from . import merge_with_deletion_vectors, sqlserver_source
from .asset_store import AssetStore
from .commit_metadata import NotPublished, Published, to_json, user_metadata, without_user_metadata
from .concurrent_commits import retry_conflicts
from .delta_location import is_local, local_path
from .driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from .key_clustering import clustered, is_large, target_key_condition
from .mirror_merge import (
    DELETE,
    MISSING_ROW,
    OPERATION,
    after,
    last_change_per_key,
    last_changes_as,
    net_counts,
    rows_after_keyed_changes,
    rows_after_multiset_changes,
)
from .session import write_parallelism
from .spark_sql_names import sql_name
from .store_reads import PLAIN_PARQUET_READER_FEATURES
from .stored_columns import decode_from_delta, encode_for_delta, encode_rows, stored_name

log = logging.getLogger(__name__)

MIRROR_TABLE_PROPERTIES = {
    "delta.enableDeletionVectors": "true",
    "delta.enableChangeDataFeed": "true",
}
LSN = "lsn"  # the property holding the LSN a mirror commit reached (Lsn.hex)
ROWS = "rows"  # ... and the mirror's rows after it
SNAPSHOT_VERSION = "snapshot_version"  # ... the write id of the snapshot it is built from
COMMIT_TIME = "as_of_commit_time"  # ... the commit time of the last change it applied
COLUMNS = "columns"  # ... and its columns
ACTION = "_cdc_action"
COPIES = "_cdc_copies"
# A range of at most this many change rows into a keyed mirror is merged in the driver (held
# there as Arrow): by delta-rs into a small mirror, with deletion vectors written there into one
# that has them (:mod:`.merge_with_deletion_vectors`). A new snapshot of at most
# DRIVER_WRITE_ROWS rows, with no changes to apply, is written as the mirror from the driver.
DRIVER_MERGE_ROWS = 100_000


@dataclass(frozen=True)
class ChangeRanges:
    """Range partitions of a table's change log that its mirror applies, oldest first."""

    change_log: tuple[str, ...]  # the change log's key path
    partitions: tuple[str, ...]
    rows: int  # the change rows they hold (0: quiet ranges, nothing to read)
    key_columns: tuple[str, ...]  # the table's key; none: the mirror is a multiset of rows
    after: bytes | None  # the LSN the changes apply from: those at or below it are ignored


@dataclass(frozen=True)
class SnapshotPartition:
    """The change log's snapshot partition that a mirror is rebuilt from."""

    partition: str
    rows: int | None  # the snapshot's rows, when known


def position_of(properties: Mapping[str, Any] | None) -> MirrorPosition | None:
    """The position a mirror commit recorded in its properties (its ``userMetadata``); None for
    a mirror without a commit that has properties."""
    if not properties:
        return None
    text = properties.get(LSN)
    lsn = Lsn.parse(text) if text else None
    rows = properties.get(ROWS)
    columns = properties.get(COLUMNS)
    return MirrorPosition(
        lsn=lsn,
        snapshot_version=properties.get(SNAPSHOT_VERSION),
        rows=rows if isinstance(rows, int) else None,
        commit_lsn=lsn,
        commit_time=properties.get(COMMIT_TIME),
        columns=tuple(columns) if columns is not None else None,
    )


def position_properties(position: MirrorPosition) -> dict[str, Any]:
    """The properties a mirror commit records of ``position`` (those :func:`position_of` reads;
    the rows, commit time and columns only when known): the commit's own LSN is ``lsn``."""
    assert position.lsn is not None, "a mirror commit records the LSN it reached"
    found: dict[str, Any] = {LSN: position.lsn.hex, SNAPSHOT_VERSION: position.snapshot_version}
    if position.rows is not None:
        found[ROWS] = position.rows
    if position.commit_time is not None:
        found[COMMIT_TIME] = position.commit_time
    if position.columns is not None:
        found[COLUMNS] = list(position.columns)
    return found


def apply(
    spark: SparkSession,
    store: AssetStore,
    changes: ChangeRanges,
    *,
    to: Sequence[str],
    properties: Mapping[str, Any],
    mirror_rows: int | None = None,
    snapshot: SnapshotPartition | None = None,
) -> Published:
    """Bring the mirror at ``to`` forward by ``changes``, committed with ``properties`` and its
    rows after them (:data:`ROWS`). The one place that chooses how:

    - ``snapshot`` given (a new snapshot): the mirror is its rows with ``changes`` applied,
      written whole; from the driver when it is small (:data:`DRIVER_WRITE_ROWS`) and there is
      no change to apply, else by Spark (clustered by key when large);
    - no change rows (quiet ranges only): no commit, the mirror's current version with its
      ``mirror_rows`` (its rows, counted when not known);
    - at most :data:`DRIVER_MERGE_ROWS` change rows that the driver reads: merged in the
      driver (:func:`driver_merge_keyed`, :func:`driver_merge_multiset`), no Spark job;
    - otherwise Spark's MERGE (:func:`spark_merge_keyed`, :func:`spark_merge_multiset`)."""
    if snapshot is not None:
        return _rebuild_from(spark, store, changes, snapshot, to, properties)
    if not changes.rows:
        rows = mirror_rows if mirror_rows is not None else row_count(spark, store.location(to))
        return store.unchanged(to, {**properties, ROWS: rows})
    keys, path = changes.key_columns, changes.change_log
    published = None
    small = changes.rows <= DRIVER_MERGE_ROWS
    found = store.rows_in_driver(path, changes.partitions) if small else None
    if found is not None:
        if keys:
            published = driver_merge_keyed(
                store,
                to,
                found,
                key_columns=keys,
                snapshot_lsn=changes.after,
                properties=properties,
                mirror_rows=mirror_rows,
                change_rows=changes.rows,
            )
        else:
            published = driver_merge_multiset(
                spark, store, to, found, snapshot_lsn=changes.after, properties=properties
            )
    if published is None:
        frame = store.read_partitions(spark, path, changes.partitions)
        if keys:
            published = spark_merge_keyed(
                spark,
                store,
                to,
                frame,
                key_columns=keys,
                snapshot_lsn=changes.after,
                properties=properties,
                target_rows=mirror_rows,
            )
        else:
            published = spark_merge_multiset(
                spark, store, to, frame, snapshot_lsn=changes.after, properties=properties
            )
    # the row count: the one before plus what the MERGE's commit metrics say it inserted and
    # deleted; counted (a Spark job) only when either is not known
    rows = _rows_after(mirror_rows, published.metrics)
    if rows is None:
        rows = row_count(spark, published.uri)
    return replace(published, properties={**published.properties, ROWS: rows})


def _rebuild_from(
    spark: SparkSession,
    store: AssetStore,
    changes: ChangeRanges,
    snapshot: SnapshotPartition,
    to: Sequence[str],
    properties: Mapping[str, Any],
) -> Published:
    """:func:`apply` from a snapshot: the mirror rebuilt, its columns the snapshot's (a
    re-snapshot after a schema change brings new columns in)."""
    path, keys = changes.change_log, changes.key_columns
    small = snapshot.rows is not None and snapshot.rows <= DRIVER_WRITE_ROWS
    if not changes.rows and small:
        # a small snapshot, no changes to apply: its rows are the mirror, no Spark job
        found = store.rows_in_driver(path, [snapshot.partition])
        if found is not None:
            rows = sqlserver_source.drop_snapshot_columns_in_driver(found)
            return rebuild_in_driver(spark, store, to, rows, properties)
    base = sqlserver_source.drop_snapshot_columns(store.read(spark, path, snapshot.partition))
    merged = base
    if changes.rows:
        frame = store.read_partitions(spark, path, changes.partitions)
        if keys:
            merged = rows_after_keyed_changes(
                base, frame, key_columns=keys, snapshot_lsn=changes.after
            )
        else:
            merged = rows_after_multiset_changes(base, frame, snapshot_lsn=changes.after)
    return rebuild(
        spark,
        store,
        to,
        merged,
        properties,
        # no changes: the mirror holds the snapshot's rows, as many as it counted
        snapshot.rows if not changes.rows else None,
        key_columns=keys,
        estimated_rows=snapshot.rows,
    )


def _rows_after(before: int | None, metrics: Mapping[str, int]) -> int | None:
    """The mirror's rows after a MERGE: ``before`` and the commit's inserted and deleted rows
    (None when one of them is unknown: a MERGE that changed nothing commits no metrics)."""
    inserted = metrics.get("numTargetRowsInserted")
    deleted = metrics.get("numTargetRowsDeleted")
    if before is None or inserted is None or deleted is None:
        return None
    return before + inserted - deleted


def rebuild(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    df: DataFrame,
    properties: Mapping[str, Any],
    rows: int | None = None,
    *,
    key_columns: Sequence[str] = (),
    estimated_rows: int | None = None,
) -> Published:
    """Replace the mirror with ``df`` (from a snapshot), in one commit with ``properties``.
    ``rows``: how many rows ``df`` has, when known (the snapshot's own count, no changes
    applied): then nothing counts them and ``df`` is read once, by the write. A large keyed
    mirror (``rows`` or ``estimated_rows``) is written clustered by its ``key_columns``
    (:mod:`.key_clustering`), a small one in a few files."""
    size = rows if rows is not None else estimated_rows
    large = bool(key_columns) and is_large(size)
    if large:
        assert size is not None
        df = clustered(df, key_columns, size)
    else:
        df = df.coalesce(write_parallelism(spark))

    def finalize(written: DataFrame) -> dict[str, Any]:
        counted = written.count() if rows is None else rows
        return {**properties, COLUMNS: written.columns, ROWS: counted}

    return store.write(
        spark,
        df,
        key_path,
        None,
        finalize,
        table_properties=MIRROR_TABLE_PROPERTIES,
        read_once=rows is None,
        rows=rows,
        keep_layout=large,
    )


def rebuild_in_driver(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    rows: RowsInDriver,
    properties: Mapping[str, Any],
) -> Published:
    """:func:`rebuild` from rows read in the driver (a small snapshot without changes to
    apply): a new mirror is then created without a Spark job."""

    def finalize(written: DataFrame | pa.Table) -> dict[str, Any]:
        assert isinstance(written, pa.Table)
        return {**properties, COLUMNS: rows.schema.names, ROWS: written.num_rows}

    return store.write_in_driver(
        spark, rows, key_path, None, finalize, table_properties=MIRROR_TABLE_PROPERTIES
    )


def _target_columns(spark: SparkSession, uri: str) -> list[str]:
    """The mirror's column names as the source has them (not as stored)."""
    return decode_from_delta(spark.read.format("delta").load(uri)).columns


def _s(name: str) -> str:
    """The stored column name, quoted for SQL."""
    return sql_name(stored_name(name))


def _turn_on_mirror_properties(
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


def _run_merge(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    source: DataFrame,
    statement: str,
    properties: Mapping,
) -> Published:
    """The MERGE, committed with ``properties``; a MERGE that changed nothing may make no
    commit, and then the properties get one of their own (:func:`_record`)."""
    _turn_on_mirror_properties(spark, store, key_path)
    uri = store.location(key_path)
    view = f"cdc_merge_{uuid.uuid4().hex}"
    source.createOrReplaceGlobalTempView(view)  # seen by the commit's own session
    text = to_json(properties)
    try:
        target, changes = f"delta.`{uri}`", f"global_temp.{view}"

        def merge() -> None:
            with user_metadata(spark, text) as session:
                session.sql(statement.format(target=target, source=changes)).collect()

        retry_conflicts(merge, f"MERGE into {uri}")
    finally:
        spark.catalog.dropGlobalTempView(view)
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
    columns = _target_columns(spark, uri)
    last = last_change_per_key(changes, key_columns, snapshot_lsn)
    present = set(last.columns)
    source = encode_for_delta(
        last.select(
            *[F.col(sql_name(c)) if c in present else F.lit(None).alias(c) for c in columns],
            F.col(sql_name(OPERATION)).alias(ACTION),
        )
    )
    on = " AND ".join(f"t.{_s(k)} = s.{_s(k)}" for k in key_columns)
    if is_large(target_rows):
        skip = target_key_condition(source, [stored_name(k) for k in key_columns])
        on += f" AND {skip}" if skip else ""
    sets = ", ".join(f"t.{_s(c)} = s.{_s(c)}" for c in columns if c not in key_columns)
    names = ", ".join(_s(c) for c in columns)
    values = ", ".join(f"s.{_s(c)}" for c in columns)
    statement = (
        f"MERGE INTO {{target}} t USING {{source}} s ON {on} "
        f"WHEN MATCHED AND s.{ACTION} = 1 THEN DELETE "
        + (f"WHEN MATCHED THEN UPDATE SET {sets} " if sets else "")
        + f"WHEN NOT MATCHED AND s.{ACTION} <> 1 THEN INSERT ({names}) VALUES ({values})"
    )
    return _run_merge(spark, store, key_path, source, statement, properties)


def _q(name: str) -> str:
    """``name`` quoted for delta-rs's SQL expressions (case kept)."""
    return '"' + name.replace('"', '""') + '"'


def driver_merge_keyed(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    key_columns: Sequence[str],
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
    mirror_rows: int | None,
    change_rows: int,
) -> Published | None:
    """:func:`spark_merge_keyed` in the driver, for a range of ``change_rows`` rows: the same MERGE,
    committed with the same userMetadata and with Change Data Feed, in tens of milliseconds
    where Spark's MERGE costs seconds of jobs. A mirror with deletion vectors (turned on by a
    Spark MERGE once it grew) gets them from :mod:`.merge_with_deletion_vectors` (ranges up to
    its ``DRIVER_MERGE_ROWS``); a small one (``mirror_rows``, known, and ``change_rows`` at most
    :data:`.asset_store.DRIVER_WRITE_ROWS`) without them is merged by delta-rs, which writes none
    and rewrites the few files a change touches. None, and nothing committed, where Spark must
    merge: a mirror on another file system, a large one without deletion vectors, or a commit
    that lost to a concurrent one. ``changes`` has the columns as the source has them; columns
    stored otherwise (:mod:`.stored_columns`) are merged in the form Spark's MERGE stores."""
    from deltalake import CommitProperties
    from deltalake.exceptions import DeltaError

    uri = store.location(key_path)
    table = store.delta_table(key_path) if is_local(uri) else None
    if table is None:
        return None
    configuration = table.metadata().configuration
    if configuration.get("delta.enableDeletionVectors") == "true":
        if change_rows > DRIVER_MERGE_ROWS:
            return None
        return merge_with_deletion_vectors.deletion_vector_merge_keyed(
            store,
            key_path,
            changes,
            key_columns=key_columns,
            snapshot_lsn=snapshot_lsn,
            properties=properties,
        )
    if mirror_rows is None or max(mirror_rows, change_rows) > DRIVER_WRITE_ROWS:
        return None
    if set(table.protocol().reader_features or []) - PLAIN_PARQUET_READER_FEATURES:
        return None
    target = pa.schema(table.schema().to_arrow())
    keys = [stored_name(k) for k in key_columns]
    stored = encode_rows(changes.schema, changes.read())
    source = last_changes_as(target, stored, keys, snapshot_lsn, ACTION)
    columns = target.names
    text = to_json(properties)
    on = " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in keys)
    merger = table.merge(
        source=source,
        predicate=on,
        source_alias="s",
        target_alias="t",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
    ).when_matched_delete(predicate=f"s.{_q(ACTION)} = {DELETE}")
    others = [c for c in columns if c not in keys]
    if others:
        merger = merger.when_matched_update(updates={_q(c): f"s.{_q(c)}" for c in others})
    merger = merger.when_not_matched_insert(
        updates={_q(c): f"s.{_q(c)}" for c in columns}, predicate=f"s.{_q(ACTION)} <> {DELETE}"
    )
    try:
        merger.execute()
    except DeltaError as exc:  # lost to a concurrent commit, ...: Spark merges it
        log.warning("delta-rs could not merge into %s (%s); Spark merges it", uri, exc)
        return None
    published = store.newest_commit(key_path, dict(properties))
    if published.user_metadata != text:
        return None  # the MERGE made no commit: Spark's records the properties
    return published


def driver_merge_multiset(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    snapshot_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published | None:
    """:func:`spark_merge_multiset` in the driver, for a small range: the same commit, with deletion
    vectors written there
    (:func:`.merge_with_deletion_vectors.deletion_vector_merge_multiset`). A mirror
    created small, by delta-rs, gets deletion vectors first (one ``ALTER TABLE``, as before its
    first Spark MERGE). None, nothing committed, where Spark must merge."""
    uri = store.location(key_path)
    if not is_local(uri) or not (local_path(uri) / "_delta_log").is_dir():
        return None  # (a file-system check: the two calls below read the log)
    _turn_on_mirror_properties(spark, store, key_path)
    return merge_with_deletion_vectors.deletion_vector_merge_multiset(
        store, key_path, changes, snapshot_lsn=snapshot_lsn, properties=properties
    )


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
    on = " AND ".join(f"t.{_s(c)} <=> s.{_s(c)}" for c in columns)
    names = ", ".join(_s(c) for c in columns)
    values = ", ".join(f"s.{_s(c)}" for c in columns)
    statement = (
        f"MERGE INTO {{target}} t USING {{source}} s ON s.{ACTION} = 'd' AND {on} "
        "WHEN MATCHED THEN DELETE "
        f"WHEN NOT MATCHED AND s.{ACTION} = 'i' THEN INSERT ({names}) VALUES ({values})"
    )
    return _run_merge(spark, store, key_path, source, statement, properties)


def lsn_versions(spark: SparkSession, uri: str) -> list[tuple[Lsn, int]]:
    """(LSN, Delta version) for every commit of the mirror that recorded an LSN, oldest first
    (as far back as the Delta log keeps history: ``delta.logRetentionDuration``)."""
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").select("version", "userMetadata")
    found = []
    for row in rows.collect():
        if not row["userMetadata"]:
            continue
        try:
            lsn = json.loads(row["userMetadata"]).get(LSN)
        except ValueError:
            continue
        if lsn:
            found.append((Lsn.parse(lsn), int(row["version"])))
    return sorted(found, key=lambda pair: pair[1])


def read_mirror_as_of(spark: SparkSession, path: str, lsn: Lsn | str) -> DataFrame:
    """The mirror at ``path`` (its Delta table) as it was at ``lsn``: the newest version whose
    recorded LSN is at or below ``lsn``. :class:`NotPublished` if the mirror had not reached it
    (or the log no longer goes back that far).

    ``lsn`` is an :class:`~cdc_assets.lsn.Lsn` or any text :meth:`Lsn.parse` accepts.
    """
    target = lsn if isinstance(lsn, Lsn) else Lsn.parse(lsn)
    candidates = [version for at, version in lsn_versions(spark, path) if at <= target]
    if not candidates:
        raise NotPublished(f"the mirror at {path} has no version at or before {target.hex}")
    version = max(candidates)
    return decode_from_delta(spark.read.format("delta").option("versionAsOf", version).load(path))
