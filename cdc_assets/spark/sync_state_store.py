"""A source's sync state as one small Delta table: a row per captured table (``table``, an id,
and ``state``, a JSON text), next to the assets under the storage base path.

Read in one go without Spark (delta-rs: a 1000-row table in milliseconds), so the sync sensor
learns where every table of a source stands from one read instead of two or three per table.
Rows are changed by compare-and-swap: a ``MERGE`` that replaces a row only where it still holds
the text the writer read (or inserts it where there was none), so two writers never undo each
other: the one that read an older row changes nothing for that table. Locally the MERGE is
delta-rs's (tens of milliseconds); on an object store it is Spark's SQL ``MERGE``, which commits
through the Hadoop file system as every other write here (delta-rs would need a locking setup of
its own there). A MERGE that loses to a concurrent commit is run again
(:func:`.concurrent_commits.retry_conflicts`)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from pyspark.sql import SparkSession

from .asset_store import AssetStore
from .compaction import compact_after_commit
from .concurrent_commits import retry_conflicts
from .delta_location import is_local

TABLE = "table_id"
STATE = "state"
EXPECTED = "expected"
# Checkpoints keep the log short for delta-rs reads (a few writes per sync run).
TABLE_CONFIGURATION = {"delta.checkpointInterval": "20"}

MISSING_TABLE = (
    "DELTA_MISSING_DELTA_TABLE",
    "PATH_NOT_FOUND",
    "is not a Delta table",
    "does not exist",
)
Swap = tuple[str | None, str]  # (the row's text as read, or None when there was no row; new)


def read_rows(store: AssetStore, key_path: Sequence[str]) -> dict[str, str]:
    """Every row: table id -> state text ({} when the table does not exist yet)."""
    table = store.delta_table(key_path)
    if table is None:
        return {}
    # One thread: pyarrow's thread pool started after a delta-rs MERGE in the same process
    # makes the interpreter abort at exit ("terminate called without an active exception").
    rows = table.to_pyarrow_dataset().to_table(columns=[TABLE, STATE], use_threads=False)
    return {r[TABLE]: r[STATE] for r in rows.to_pylist()}


def swap_rows(
    spark: SparkSession | None,
    store: AssetStore,
    key_path: Sequence[str],
    swaps: Mapping[str, Swap],
) -> None:
    """Set each table's row to its new text where it still holds the text read (inserted where
    there was none and still is none); rows changed by someone else meanwhile stay as they are.
    ``spark`` is needed only on object stores."""
    changed = {t: s for t, s in swaps.items() if s[0] != s[1]}
    if not changed:
        return
    uri = store.location(key_path)
    if is_local(uri):
        retry_conflicts(lambda: _swap_delta_rs(store, key_path, changed), f"updating {uri}")
    elif spark is None:
        raise RuntimeError(f"updating {uri} on an object store needs a Spark session")
    else:
        retry_conflicts(lambda: _swap_spark(spark, uri, changed), f"updating {uri}")
    compact_after_commit(spark, store, key_path)  # rewritten a few times per range


def _rows(swaps: Mapping[str, Swap]) -> list[dict[str, str | None]]:
    return [{TABLE: t, STATE: new, EXPECTED: old} for t, (old, new) in sorted(swaps.items())]


def _swap_delta_rs(store: AssetStore, key_path: Sequence[str], swaps: Mapping[str, Swap]) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake
    from deltalake.exceptions import DeltaError

    schema = pa.schema([(TABLE, pa.string()), (STATE, pa.string()), (EXPECTED, pa.string())])
    source = pa.Table.from_pylist(_rows(swaps), schema=schema)
    table = store.delta_table(key_path)
    if table is None:
        # The first write creates the table with the rows that had none (a writer that
        # loses that race merges into the winner's table below).
        fresh = source.filter(pc.is_null(source[EXPECTED])).drop_columns([EXPECTED])
        try:
            write_deltalake(
                store.location(key_path), fresh, mode="error", configuration=TABLE_CONFIGURATION
            )
            return
        except DeltaError:
            table = store.delta_table(key_path)
            if table is None:
                raise
    (
        table.merge(
            source,
            predicate=f"t.{TABLE} = s.{TABLE}",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_update(updates={STATE: f"s.{STATE}"}, predicate=f"t.{STATE} = s.{EXPECTED}")
        .when_not_matched_insert(
            updates={TABLE: f"s.{TABLE}", STATE: f"s.{STATE}"},
            predicate=f"s.{EXPECTED} IS NULL",
        )
        .execute()
    )


def _swap_spark(spark: SparkSession, uri: str, swaps: Mapping[str, Swap]) -> None:
    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField(name, T.StringType()) for name in (TABLE, STATE, EXPECTED)]
    )
    source = spark.createDataFrame([tuple(r.values()) for r in _rows(swaps)], schema)
    created = (
        source.where(f"{EXPECTED} IS NULL")
        .drop(EXPECTED)
        .write.format("delta")
        .option("delta.checkpointInterval", TABLE_CONFIGURATION["delta.checkpointInterval"])
    )
    try:
        spark.read.format("delta").load(uri).limit(0).collect()
    except Exception as exc:
        if not any(m in str(exc) for m in MISSING_TABLE):
            raise
        created.mode("errorifexists").save(uri)
        return
    view = f"cdc_state_{uuid.uuid4().hex}"
    source.createOrReplaceTempView(view)
    try:
        spark.sql(
            f"MERGE INTO delta.`{uri}` t USING {view} s ON t.`{TABLE}` = s.`{TABLE}` "
            f"WHEN MATCHED AND t.{STATE} = s.{EXPECTED} THEN UPDATE SET t.{STATE} = s.{STATE} "
            f"WHEN NOT MATCHED AND s.{EXPECTED} IS NULL THEN "
            f"INSERT (`{TABLE}`, {STATE}) VALUES (s.`{TABLE}`, s.{STATE})"
        ).collect()
    finally:
        spark.catalog.dropTempView(view)
