"""Checks on the histories, as the mirrors have them (:mod:`.mirror_checks`), on demand (the UI's
"Execute checks") and in the source's health job:

- ``at_chain_end``: the history is at the end of the LSN chain (the mirrors' rule; the
  histories step reports it after every range itself);
- ``reconcile``: the history's current versions are as many as the source table's rows at the
  history's LSN (the mirrors' reconcile: one exact snapshot of the source, corrected by the
  captured changes since);
- ``interval_integrity``: every version's interval is well formed (it ends after it starts, and
  it is current exactly while it has no end); for a keyed table no key has two current versions
  and no two versions of a key overlap; for a keyless table (a multiset, where equal rows'
  versions may overlap) the current versions of each row are as many as the copies the mirror
  holds of it, when the mirror is at the history's LSN.

A failed check says what to do: a history whose intervals are broken is rebuilt by deleting its
Delta table (the next range run builds it again, on the table's snapshot, or on its mirror when
the snapshot's ranges are retired; the versions before are lost).
"""

import json
from collections.abc import Iterator
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    DynamicPartitionsDefinition,
    multi_asset_check,
)
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from cdc_assets.lsn import Lsn
from cdc_assets.spark import history_store, mirror_versions
from cdc_assets.spark.history_store import END_LSN_COLUMN, IS_CURRENT, START_LSN_COLUMN
from cdc_assets.spark.spark_sql_names import sql_name
from cdc_assets.sqlserver import SnapshotIsolationNotAllowed, SqlServerError

from .mirror_checks import (
    RECONCILE,
    TIME_TRAVEL_REFUSED,
    _capture_not_past,
    _not_counted,
    _reconcile,
    source_counts,
)
from .sync.chain_end_check import AT_CHAIN_END, ChainEndView
from .sync.history_check_results import history_at_chain_end, on_history
from .sync.history_plan import history_position
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync

INTERVAL_INTEGRITY = "interval_integrity"
EXAMPLES = 3  # broken versions named in a failed check


def build_history_checks(
    source: Source, partitions: DynamicPartitionsDefinition
) -> list[AssetChecksDefinition]:
    """``<source>_history_checks`` (none when the source keeps no history)."""
    tables = list(source.history_tables)
    if not tables:
        return []
    by_key = {t.history_key: t for t in tables}
    specs = [
        spec
        for t in tables
        for spec in (
            AssetCheckSpec(
                AT_CHAIN_END,
                asset=t.history_key,
                description="The history is at the end of the LSN chain: every materialized "
                "range has been applied.",
            ),
            AssetCheckSpec(
                RECONCILE,
                asset=t.history_key,
                description="The history has as many current versions as the source table had "
                "rows at the history's LSN (counted in an exact snapshot, corrected by the "
                "changes since).",
            ),
            AssetCheckSpec(
                INTERVAL_INTEGRITY,
                asset=t.history_key,
                description="Every version ends after it starts and is current exactly while "
                "it has no end; no key has two current versions and no two versions of a key "
                "overlap (keyless: each row's current versions are as many as the mirror's "
                "copies of it).",
            ),
        )
    ]

    @multi_asset_check(
        name=f"{source.name}_history_checks",
        specs=specs,
        can_subset=True,
        required_resource_keys={"pyspark"},
        description=f"On-demand checks of the histories of source '{source.name}'.",
    )
    def history_checks(context: AssetCheckExecutionContext) -> Iterator[AssetCheckResult]:
        wanted = context.selected_asset_check_keys
        chosen = sorted({by_key[k.asset_key] for k in wanted}, key=lambda t: t.history_key.path)

        def asked(table: CapturedTable, name: str) -> bool:
            return any(k.asset_key == table.history_key and k.name == name for k in wanted)

        if any(asked(t, AT_CHAIN_END) for t in chosen):
            sync = SourceSync.load(source)
            view = ChainEndView.read(context.instance, source)
            for table in chosen:
                if asked(table, AT_CHAIN_END):
                    position = history_position(source, table)
                    at = position.lsn if position else None
                    yield history_at_chain_end(view, table, at, sync[table])
        spark = context.resources.pyspark.spark_session
        for table in chosen:
            if asked(table, INTERVAL_INTEGRITY):
                yield interval_integrity(spark, source, table)
        reconciling = [t for t in chosen if asked(t, RECONCILE)]
        if reconciling:
            yield from _reconcile_histories(spark, source, reconciling)

    return [history_checks]


def _newest(source: Source, table: CapturedTable) -> tuple[int, dict[str, Any]] | None:
    """The history's newest Delta version and what its newest commit with a position recorded
    (one read of its log: a write made outside the sync, which records none, is in the version
    and leaves the position as it was); None before its first build."""
    commits = source.store.history(table.history_key.path, limit=50)
    if not commits:
        return None
    recorded = next((c["userMetadata"] for c in commits if c.get("userMetadata")), None)
    return int(commits[0]["version"]), json.loads(recorded) if recorded else {}


def _history_at(
    spark: SparkSession, source: Source, table: CapturedTable
) -> tuple[Lsn, int] | None:
    """The LSN the history is at and its current versions then (its newest Delta version);
    None before its first build."""
    found = _newest(source, table)
    position = history_store.position_of(found[1]) if found is not None else None
    if found is None or position is None:
        return None
    current = source.store.read(spark, table.history_key.path, None, version=found[0])
    return position.lsn, current.where(F.col(IS_CURRENT)).count()


def _reconcile_histories(
    spark: SparkSession, source: Source, tables: list[CapturedTable]
) -> Iterator[AssetCheckResult]:
    """The mirrors' reconcile (:func:`.mirror_checks._reconcile`), of the histories' current
    versions."""
    histories = {t: found for t in tables if (found := _history_at(spark, source, t))}
    try:
        snapshot_lsn, counts = source_counts(source, tables)
    except (SnapshotIsolationNotAllowed, SqlServerError) as exc:
        for table in tables:
            yield on_history(_not_counted(table, f"could not count the source: {exc}"), table)
        return
    behind = [t for t in histories if histories[t][0] < snapshot_lsn]
    try:
        why = _capture_not_past(source, snapshot_lsn) if behind else None
    except SqlServerError as exc:
        why = f"could not count the changes since the history: {exc}"
    for table in tables:
        if why is not None:
            result = _not_counted(table, why)
        elif table not in histories:
            result = _not_counted(table, "the history has not been materialized yet")
        else:
            result = _reconcile(source, table, snapshot_lsn, counts[table], histories[table])
        yield on_history(result, table)


def interval_integrity(
    spark: SparkSession, source: Source, table: CapturedTable
) -> AssetCheckResult:
    """The ``interval_integrity`` check of ``table``'s history (module doc)."""
    found = _newest(source, table)
    if found is None:
        return _integrity(table, False, "the history has not been materialized yet", {})
    history = source.store.read(spark, table.history_key.path, None, version=found[0])
    keys = list(table.instance.key_columns)  # as the history reads: names, not stored names
    start, end, current = F.col(START_LSN_COLUMN), F.col(END_LSN_COLUMN), F.col(IS_CURRENT)
    conditions: dict[str, Column] = {
        "versions that end at or before they start, or are current while they have an end "
        "(or not current without one)": (end.isNotNull() & (end <= start))
        | (current != end.isNull()),
    }
    flagged = history
    if keys:
        by_key = Window.partitionBy(*[F.col(sql_name(k)) for k in keys]).orderBy(start)
        flagged = history.withColumn("__previous_end", F.lag(end).over(by_key)).withColumn(
            "__previous", F.lag(start).over(by_key)
        )
        conditions["keys with two versions whose intervals overlap (or two current ones)"] = F.col(
            "__previous"
        ).isNotNull() & (F.col("__previous_end").isNull() | (F.col("__previous_end") > start))
    # one Spark job counts the versions and each kind of broken one; examples only where found
    counted = flagged.agg(
        F.count(F.lit(1)).alias("__versions"),
        *[F.sum(c.cast("int")).alias(f"__broken{i}") for i, c in enumerate(conditions.values())],
    ).first()
    assert counted is not None  # an aggregate has one row
    metadata: dict[str, Any] = {"versions": counted["__versions"]}
    problems: dict[str, DataFrame] = {
        what: flagged.where(condition).select(*[F.col(sql_name(c)) for c in history.columns])
        for i, (what, condition) in enumerate(conditions.items())
        if counted[f"__broken{i}"]
    }
    if not keys:
        problems.update(_multiset_problems(spark, source, table, history, found[1]))
    failed = []
    for what, rows in problems.items():
        examples = rows.limit(EXAMPLES).collect()
        if examples:
            shown = "; ".join(_brief(r.asDict(), keys) for r in examples)
            failed.append(f"{what}, e.g. {shown}")
    if not failed:
        return _integrity(table, True, "every version's interval is consistent", metadata)
    uri = source.store.location(table.history_key.path)
    return _integrity(
        table,
        False,
        f"the history of {table.qualified_name} has broken intervals: {' | '.join(failed)}. "
        f"To rebuild it, delete its Delta table ({uri}): the next range run builds it again "
        "(on the table's snapshot, or on its mirror when the snapshot's ranges are retired; "
        "the versions before are lost). And report this: it is a bug or a write made outside "
        "cdc_assets.",
        metadata,
    )


def _multiset_problems(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    history: DataFrame,
    committed: dict[str, Any],
) -> dict[str, DataFrame]:
    """A keyless history's rows whose current versions are not as many as the mirror's copies
    of them, when the mirror is at the history's LSN (else nothing to compare)."""
    position = history_store.position_of(committed)
    rows = _mirror_rows_at(spark, source, table, position.lsn) if position is not None else None
    if rows is None:
        return {}
    columns = [c for c in history.columns if c not in history_store.VALIDITY_COLUMNS]
    cols = [F.col(sql_name(c)) for c in columns]
    held = history.where(F.col(IS_CURRENT)).groupBy(*cols).agg(F.count("*").alias("__held"))
    copies = rows.select(*cols).groupBy(*cols).agg(F.count("*").alias("__copies"))
    same_row = [held[sql_name(c)].eqNullSafe(copies[sql_name(c)]) for c in columns]
    differ = held.join(copies, on=same_row, how="full_outer").where(
        ~F.col("__held").eqNullSafe(F.col("__copies"))
    )
    return {"rows whose current versions are not as many as the mirror's copies": differ}


def _mirror_rows_at(
    spark: SparkSession, source: Source, table: CapturedTable, lsn: Lsn
) -> DataFrame | None:
    """The mirror's rows in the Delta version whose commit recorded ``lsn`` as its position (a
    range merged since, or a compaction, changes nothing here); None when the mirror is at
    another LSN, or Delta no longer serves that version (older than the table's
    ``deletedFileRetentionDuration``)."""
    path = table.mirror_key.path
    found = source.store.commit_properties(path)
    position = mirror_versions.position_of(found[1]) if found is not None else None
    if found is None or position is None or position.lsn != lsn:
        return None
    try:
        rows = source.store.read(spark, path, None, version=found[0])
        if not rows.columns:  # Delta resolves the version here (Spark Connect: not before)
            return None
    except Exception as exc:
        if TIME_TRAVEL_REFUSED not in str(exc):
            raise
        return None
    return rows


def _brief(row: dict[str, Any], keys: list[str]) -> str:
    """A broken version (or row) as a failed check names it: its key and interval (keyless:
    its values and counts)."""
    names = [*keys, START_LSN_COLUMN, END_LSN_COLUMN] if keys else list(row)
    shown = {}
    for name in names:
        value = row.get(name)
        shown[name] = bytes(value).hex() if isinstance(value, bytes | bytearray) else value
    return str(shown)[:300]


def _integrity(
    table: CapturedTable, passed: bool, description: str, metadata: dict[str, Any]
) -> AssetCheckResult:
    return AssetCheckResult(
        asset_key=table.history_key,
        check_name=INTERVAL_INTEGRITY,
        passed=passed,
        severity=AssetCheckSeverity.ERROR,
        description=description,
        metadata=metadata,
    )
