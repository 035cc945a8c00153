"""``history/<source>/<schema>/<table>_history``: each table's versions (SCD type 2).

For the tables the source's ``history`` settings name, a history beside the mirror, on the same
partitions and in the same sync runs, in a step after the mirrors' (so a range's mirrors never
wait for its histories): materializing range ``(lo, hi]`` brings every selected history to
``hi``, applying the ranges it has not applied yet (usually just this one) in one commit
(:mod:`cdc_assets.spark.history_driver`: in the driver for a small range, else one Spark
MERGE). Like the mirror, a history is built from its table's snapshot by the first range run
at or after the snapshot LSN (the ``snapshot`` run writes the change log; the state at the
snapshot LSN needs the changes up to it, which a lock-free snapshot takes from the ranges): its
versions open at the snapshot LSN. A new snapshot of the table (a re-snapshot) closes, at its
LSN, the versions of rows that vanished or differ and opens the rows that differ: the history
before it stays. Each commit records the LSN reached and the snapshot it is built on, so a range
already applied is never applied twice; quiet ranges move a history in the source's sync state,
as they move a mirror (:mod:`.sync.history_plan`, :mod:`.sync.quiet_ranges`).

A history never applies a range that failed its coverage check, nor skips one: the table's
history stays where it was with a message, the other tables' histories apply the range, the
history is retried on its own schedule (:mod:`.sync.table_failures`; its table's change log and
mirror go on meanwhile) and the step fails at the end naming those it left. Each history of
the run reports its ``at_chain_end`` check, as the mirrors do (:mod:`.sync.chain_end_check`).
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetExecutionContext,
    AssetMaterialization,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    Output,
    multi_asset,
)
from dagster._core.storage.tags import PRIORITY_TAG
from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import history_store
from cdc_assets.spark.history_driver import ROWS
from cdc_assets.spark.session import use_in_this_thread

from .sync.chain import RangeReader, retired_through
from .sync.chain_end_check import ChainEndView, as_evaluation
from .sync.history_check_results import history_at_chain_end
from .sync.history_plan import history_position, plan_history
from .sync.io_manager import Written, write_output
from .sync.names import SNAPSHOT_PARTITION
from .sync.partitions import parse_partition
from .sync.range_order import wait_for_earlier_ranges
from .sync.source import CapturedTable, Source
from .sync.sync_state import SourceSync, TableSync
from .sync.table_failures import cleared, record_failures
from .sync.table_names import register_table
from .sync.table_pool import LogLine, pooled_events
from .sync.table_steps import after_change_logs, current_table_out, step_name, table_groups

__all__ = ["build_histories", "history_position"]

# The histories step runs after the mirrors step of its run (Dagster runs a run's ready steps in
# order of this tag, highest first; the mirrors' is the default, 0).
AFTER_THE_MIRRORS = {PRIORITY_TAG: "-1"}


def build_histories(
    source: Source, partitions: DynamicPartitionsDefinition
) -> list[AssetsDefinition]:
    """The history multi-assets of ``source`` (none when its settings name no table): one output
    per table with a history, one step per group of tables, each after their change logs."""
    tables = list(source.history_tables)
    if not tables:
        return []
    groups = table_groups(tables)
    return [_history_step(source, partitions, g, i, len(groups)) for i, g in enumerate(groups)]


def _history_step(
    source: Source,
    partitions: DynamicPartitionsDefinition,
    tables: list[CapturedTable],
    index: int,
    groups: int,
) -> AssetsDefinition:
    """The history multi-asset of ``tables``, group ``index`` of ``source``'s history tables."""
    by_key = {t.history_key: t for t in tables}
    outs = {
        t: current_table_out(
            source,
            t,
            t.history_key,
            f"History (SCD type 2) of {t.qualified_name} in source '{source.name}': "
            "one version per key and transaction that changed it, valid from __start_lsn / "
            "__start_at to __end_lsn / __end_at (null while __is_current), applied range by "
            "range from the change log.",
        )
        for t in tables
    }

    @multi_asset(
        **after_change_logs(
            step_name(f"{source.name}_histories", index, groups),
            partitions,
            tables,
            outs,
            lambda t: t.history_key,
        ),
        op_tags=AFTER_THE_MIRRORS,
    )
    def histories(
        context: AssetExecutionContext,
    ) -> Iterator[Output | AssetMaterialization | AssetCheckEvaluation]:
        lsn_range = parse_partition(context.partition_key)
        if lsn_range is None:
            context.log.info("histories move with range partitions; a range run builds them")
            return
        wait_for_earlier_ranges(context.instance, source.name, context.run, context.log.info)
        spark = context.resources.pyspark.spark_session
        ranges = RangeReader(context.instance, partitions.name)
        retired = retired_through(context.instance, partitions.name)
        sync = SourceSync.load(source)
        updates: dict[CapturedTable, TableSync] = {}
        chosen = [by_key[k] for k in sorted(k for k in context.selected_asset_keys if k in by_key)]
        # a failed table's history stays where it was; the others go on
        failed = yield from pooled_events(
            context.log,
            chosen,
            lambda t: table_events(spark, t, lsn_range, ranges, sync, retired, updates),
            source.config.sync.tables_in_parallel,
            lambda: use_in_this_thread(spark),
        )
        # where the histories are now (after their commits), and those that failed, each
        # retried on its own schedule (counted apart from the table's: its mirror goes on)
        rows = record_failures(
            context.instance, context.run.run_id, spark, sync, failed, updates, history=True
        )
        view = ChainEndView.read(context.instance, source)
        for table in chosen:
            row = rows.get(table, sync[table])
            yield as_evaluation(history_at_chain_end(view, table, row.history_at, row), None)
        if failed:
            raise Failure(
                description=f"{len(failed)} of {len(chosen)} histories left where they were "
                "(the others applied the range): " + " | ".join(failed.values())
            )

    def table_events(
        spark: SparkSession,
        table: CapturedTable,
        lsn_range: LsnRange,
        ranges: Callable[[Lsn], Sequence[LsnRange]],
        sync: SourceSync,
        retired: Lsn | None,
        updates: dict[CapturedTable, TableSync],
    ) -> Iterator[Output | AssetMaterialization | LogLine]:
        """One table's history brought to the range's end, in a worker thread: its events are
        yielded by the step, its new sync-state row goes into ``updates``."""
        key = table.history_key
        plan = plan_history(spark, source, table, lsn_range.hi, ranges, sync, retired)
        published = (
            write_output(spark, source.store, key.path, None, plan.write)
            if plan.write is not None
            else None
        )
        rows = published.properties.get(ROWS) if published is not None else None
        updates[table] = cleared(
            plan.row(sync[table], rows if isinstance(rows, int) else None), history=True
        )
        if plan.done.get("rebased_on_snapshot") and published is not None:
            yield from register_table(spark, source, key)  # its columns may have changed
        if plan.done.get("rebased_on_snapshot"):
            # its 'snapshot' partition shows as materialized (as a mirror's does), logged
            # before the range's output, so the latest materialization is the range's
            yield AssetMaterialization(
                asset_key=key,
                partition=SNAPSHOT_PARTITION,
                description=f"built on the table's snapshot by the run of range {lsn_range.key}",
                metadata={"applied_by_range": lsn_range.key},
            )
        done = {k: v for k, v in plan.done.items() if v is not None}
        row = updates[table]
        if plan.reached is None or row.history_at is None or row.history_at < lsn_range.hi:
            yield LogLine("info", f"{key.to_user_string()} is left as it is: {plan.why}")
            return
        if published is None:
            # quiet ranges: the range shows, with no commit of its own
            published = source.store.unchanged(
                key.path, {history_store.LSN: row.history_at.hex, ROWS: row.history_rows}
            )
            done["quiet"] = True
        applied = published

        def metadata(p: dict[str, Any]) -> dict[str, Any]:
            return {
                "history_lsn": p[history_store.LSN],
                **({"dagster/row_count": p[ROWS]} if isinstance(p.get(ROWS), int) else {}),
                **done,
                **(
                    {
                        "versions_opened": applied.metrics.get("numTargetRowsInserted"),
                        "versions_closed_or_updated": applied.metrics.get("numTargetRowsUpdated"),
                    }
                    if applied.committed
                    else {}
                ),
            }

        yield Output(Written(published, metadata), output_name=key.to_python_identifier())

    return histories
