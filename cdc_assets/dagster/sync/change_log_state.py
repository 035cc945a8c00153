"""What the store says about a table's change log besides its data: the snapshot it was taken
with (or the snapshot under way, not published until its last chunk commit), and the gap
marks — a range refused because cleanup removed changes it needs (or a schema change), which
tells the sync sensor to re-snapshot the table (``sync.on_gap``)."""

from pyspark.sql import SparkSession

from cdc_assets.records import Gap
from cdc_assets.spark.change_log_properties import gap_of, gap_properties
from cdc_assets.spark.partition_rows import WRITE_ID
from cdc_assets.spark.snapshot_chunks import SnapshotProgress

from .chain import SnapshotInfo
from .names import SNAPSHOT_PARTITION
from .source import CapturedTable, Source


def snapshot_info(source: Source, table: CapturedTable) -> SnapshotInfo | None:
    path = table.change_log_key.path
    properties = source.store.properties(path, SNAPSHOT_PARTITION)
    version = properties.get(WRITE_ID) if properties else None
    return SnapshotInfo.from_properties(properties, version)


def snapshot_progress(source: Source, table: CapturedTable) -> SnapshotProgress | None:
    """The table's unfinished snapshot (written in chunk commits, not published yet): what its
    newest commit says; None when there is none (no snapshot, or a finished one)."""
    path = table.change_log_key.path
    return SnapshotProgress.from_properties(
        source.store.written_properties(path, SNAPSHOT_PARTITION)
    )


def mark_gap(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    partition_key: str,
    *,
    reason: str | None,
    snapshot: SnapshotInfo | None,
    run_id: str,
    awaits_resnapshot: bool = False,
) -> None:
    """Record that ``partition_key`` could not be read for ``table`` (nothing was written);
    ``awaits_resnapshot``: the sensor's re-snapshot resolves it as a matter of course."""
    gap = Gap(reason, snapshot.version if snapshot else None, run_id, awaits_resnapshot)
    source.store.mark_gap(spark, table.change_log_key.path, partition_key, gap_properties(gap))


def recorded_gap(source: Source, table: CapturedTable, partition_key: str) -> Gap | None:
    """The gap recorded for ``partition_key`` of ``table``'s change log, if any."""
    return gap_of(source.store.gap(table.change_log_key.path, partition_key))


class AwaitsResnapshot(Exception):
    """A range a mirror or history needs was refused for its table, which now waits for the
    re-snapshot the sensor starts (:func:`awaited_resnapshot`): it stays where it is, and the
    run does not fail for it."""


def awaited_resnapshot(
    source: Source, table: CapturedTable, snapshot: SnapshotInfo, partition_key: str
) -> AwaitsResnapshot | None:
    """Why ``table`` waits for its re-snapshot at ``partition_key``: a gap recorded there under
    its current snapshot that the re-snapshot resolves (a new capture instance, changed column
    rules, with ``sync.on_gap = resnapshot``); None otherwise (a person is needed, or nothing
    was recorded: the range has not run for the table)."""
    gap = recorded_gap(source, table, partition_key)
    if gap is None or not gap.awaits_resnapshot or gap.snapshot_version != snapshot.version:
        return None
    return AwaitsResnapshot(
        f"range {partition_key} was refused for it ({gap.reason or 'a schema change'}); it "
        "waits for the table's re-snapshot, which the sync sensor starts"
    )


def clear_gap(
    spark: SparkSession, source: Source, table: CapturedTable, partition_key: str
) -> None:
    source.store.clear_gap(spark, table.change_log_key.path, partition_key)
