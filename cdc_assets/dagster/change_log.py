"""``cdc/<source>/<schema>/<table>``: each table's change log as partitions of one source-wide
dynamic partitions definition — ``snapshot`` (the rows at the snapshot LSN) and ``<lo>-<hi>`` (the
change rows with ``lo < __$start_lsn <= hi``).

One multi-asset per source, so one run reads a range for every table of the source: the reads
are Spark jobs whose tasks open their own connections on the executors
(:mod:`cdc_assets.spark.sqlserver_source`). Each output is published with properties computed
from the written data, and two blocking checks per table follow it:

- ``coverage``: after the write, the capture instance's min LSN is still at or below ``lo + 1``
  and ``hi`` is at or below the max LSN — cleanup did not remove changes under the read;
- ``chain``: ``lo`` is the previous range's ``hi``, or at or below the table's snapshot LSN.

A failed check fails the step, so the mirrors of the source do not move in that run.

This module holds the asset factory; what a partition writes is in :mod:`.change_log_outputs`,
the checks in :mod:`.change_log_checks`, snapshot and gap marks in :mod:`.change_log_state`.
"""

from collections.abc import Iterator

from dagster import (
    AssetCheckKey,
    AssetCheckResult,
    AssetExecutionContext,
    AssetMaterialization,
    AssetOut,
    AssetsDefinition,
    DynamicPartitionsDefinition,
    Failure,
    Output,
    multi_asset,
)

from cdc_assets.sqlserver import SourceTable, discover
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.changed_tables import changed_instances
from cdc_assets.sqlserver.errors import SqlServerError

from .chain import effective_range, recent_ranges, retired_through
from .change_log_checks import (
    chain_result,
    change_log_check_specs,
    coverage_result,
    schema_change_result,
    snapshot_chain_result,
    unavailable_result,
)
from .change_log_outputs import instance_for, range_output, snapshot_output
from .change_log_state import clear_gap, mark_gap, snapshot_info
from .metadata import asset_tags, table_metadata
from .names import IO_MANAGER, RESNAPSHOT_TAG, SNAPSHOT_PARTITION, group_name
from .partitions import parse_partition
from .source import Source, Table

KINDS = {"sqlserver", "spark", "delta"}


def build_change_logs(source: Source, partitions: DynamicPartitionsDefinition) -> AssetsDefinition:
    """The change-log multi-asset of ``source`` (one output per captured table)."""
    by_key = {t.change_log_key: t for t in source.tables}
    outs = {
        t.change_log_key.to_python_identifier(): AssetOut(
            key=t.change_log_key,
            is_required=False,
            io_manager_key=IO_MANAGER,
            group_name=group_name(source.name),
            kinds=KINDS,
            description=f"Change log of {t.qualified_name} in source '{source.name}': partition "
            "'snapshot' holds the rows at the snapshot LSN, each `<lo>-<hi>` partition the "
            "change rows with `lo < __$start_lsn <= hi`.",
            metadata=table_metadata(t.instance, t.qualified_name),
            owners=list(source.config.owners),
            tags=asset_tags(source.config, t.schema),
        )
        for t in source.tables
    }

    @multi_asset(
        name=f"{source.name}_change_logs",
        outs=outs,
        check_specs=change_log_check_specs(source.tables),
        can_subset=True,
        partitions_def=partitions,
        deps=[t.source_key for t in source.tables],
        internal_asset_deps={
            t.change_log_key.to_python_identifier(): {t.source_key} for t in source.tables
        },
        required_resource_keys={"pyspark"},
    )
    def change_logs(context: AssetExecutionContext) -> Iterator[Output | AssetCheckResult]:
        try:
            yield from events(context)
        except SqlServerError as exc:
            # unreachable, login refused, connection lost...: the message and what to do, once
            raise Failure(
                description=f"source {source.name}: {exc}",
                metadata={"source_error": type(exc).__name__},
                allow_retries=True,
            ) from None

    def events(context: AssetExecutionContext) -> Iterator[Output | AssetCheckResult]:
        spark = context.resources.pyspark.spark_session
        lsn_range = parse_partition(context.partition_key)
        selected = [by_key[k] for k in context.selected_asset_keys if k in by_key]
        # the keys back to this range's start (its predecessor), not all of them
        ranges = (
            recent_ranges(context.instance, partitions.name, reach=lsn_range.lo)
            if lsn_range is not None
            else []
        )
        retired = retired_through(context.instance, partitions.name)
        wanted = context.selected_asset_check_keys
        conn = source.connect()
        try:
            catalog = discover(conn)  # once per run: capture instances of every table
            # One statement (per 200 instances) says which tables have changes in the range;
            # the quiet ones record it without reading the source or counting rows in Spark.
            changed = (
                changed_instances(conn, _instance_names(catalog, selected), lsn_range)
                if lsn_range is not None
                else {}
            )
            for table in selected:
                found = catalog.get((table.schema, table.name))
                if lsn_range is None:
                    reason = context.run.tags.get(RESNAPSHOT_TAG)
                    instance = instance_for(found, table, None)
                    stored = snapshot_output(spark, source, table, instance, reason)
                else:
                    snapshot = snapshot_info(source, table)
                    read_range = effective_range(lsn_range, snapshot)
                    instance = instance_for(found, table, (read_range or lsn_range).first)
                    refused = schema_change_result(found, table, snapshot, lsn_range)
                    if refused is None and read_range is not None:
                        refused = unavailable_result(conn, table, instance, read_range)
                    if refused is not None:
                        # Nothing is written: the blocking check fails and the mirrors wait;
                        # the gap tells the sensor to re-snapshot (sync.on_gap).
                        context.log.error(refused.description or "range not available")
                        mark_gap(
                            spark,
                            source,
                            table,
                            context.partition_key,
                            reason=refused.description,
                            snapshot=snapshot,
                            run_id=context.run.run_id,
                        )
                        chained = chain_result(table, lsn_range, ranges, snapshot, retired)
                        results = [refused, chained]
                        yield from (
                            r for r in results if AssetCheckKey(r.asset_key, r.check_name) in wanted
                        )
                        continue
                    clear_gap(spark, source, table, context.partition_key)
                    stored = range_output(
                        spark,
                        source,
                        table,
                        conn,
                        lsn_range,
                        instance,
                        read_range,
                        quiet=changed.get(instance.name) == 0,
                    )
                source_event = _source_table_event(table, context.partition_key, changed, instance)
                if source_event is not None:
                    context.log_event(source_event)
                yield Output(stored, output_name=table.change_log_key.to_python_identifier())
                # The IO manager has published the partition by now; check what it wrote.
                properties = source.store.properties(
                    table.change_log_key.path, context.partition_key
                )
                results = [coverage_result(table, properties or {})]
                if lsn_range is None:
                    results.append(snapshot_chain_result(table))
                else:
                    results.append(
                        # the snapshot read above: a range run does not write the snapshot
                        chain_result(table, lsn_range, ranges, snapshot, retired)
                    )
                yield from (
                    r for r in results if AssetCheckKey(r.asset_key, r.check_name) in wanted
                )
        finally:
            conn.close()

    return change_logs


def _source_table_event(
    table: Table, partition: str, changed: dict[str, int], instance: CaptureInstance
) -> AssetMaterialization | None:
    """What the run learnt about the SQL Server table (an external asset): read by a snapshot,
    or changed in the range. Logged before the change log's output, so the change log is never
    older than its source in the UI (no "upstream changed" badge); a quiet table logs nothing:
    it did not change."""
    if partition == SNAPSHOT_PARTITION:
        return AssetMaterialization(
            asset_key=table.source_key,
            description=f"{table.qualified_name} read whole by the snapshot "
            f"(capture instance {instance.name})",
            metadata={"read_by": SNAPSHOT_PARTITION, "capture_instance": instance.name},
        )
    changes = changed.get(instance.name)
    if not changes:
        return None
    return AssetMaterialization(
        asset_key=table.source_key,
        description=f"{table.qualified_name} changed: {changes:,} change rows in range {partition}",
        metadata={"change_rows": changes, "lsn_range": partition},
    )


def _instance_names(catalog: dict[tuple[str, str], SourceTable], tables: list[Table]) -> list[str]:
    """The established capture instances of ``tables`` (at most two per table)."""
    names = {
        instance.name
        for table in tables
        if (found := catalog.get((table.schema, table.name))) is not None
        for instance in found.instances
        if instance.is_valid
    }
    return sorted(names)
