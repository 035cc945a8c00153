"""The two checks of every change-log partition (docs/design.md section 4):

- ``coverage``: the range lies inside the capture instance's validity interval — refused before
  the read when cleanup already removed changes above ``lo`` or a newer capture instance (a schema
  change) replaced the snapshot's, and judged again after the write from the published properties;
- ``chain``: ``lo`` is the previous range's ``hi``, or at or below the table's snapshot LSN.

A failed check (severity ERROR) shows the table red; it does not block the run, so the source's
other tables go on: the mirrors step itself refuses, table by table, a range that is missing or
failed coverage, or that does not continue the mirror's chain (:mod:`.mirror`), and fails the run
at the end naming them.
"""

from collections.abc import Sequence
from typing import Any

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark.change_log_properties import range_of
from cdc_assets.sqlserver import CaptureInstance, SourceTable
from cdc_assets.sqlserver.changes import check_range_available
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.errors import LsnNotAvailable

from .sync.chain import SnapshotInfo
from .sync.names import CHAIN, COVERAGE
from .sync.source import CapturedTable


def change_log_check_specs(tables: Sequence[CapturedTable]) -> list[AssetCheckSpec]:
    """The ``coverage`` and ``chain`` checks of each table's change log (not blocking: one
    table's failed check must not stop the other tables' mirrors)."""
    return [
        spec
        for t in tables
        for spec in (
            AssetCheckSpec(
                COVERAGE,
                asset=t.change_log_key,
                blocking=False,
                description="The range was read while it lay inside the capture instance's "
                "validity interval (min LSN <= lo + 1 after the read, hi <= max LSN).",
            ),
            AssetCheckSpec(
                CHAIN,
                asset=t.change_log_key,
                blocking=False,
                description="The range continues the chain: lo is the previous range's hi, or "
                "at or below the table's snapshot LSN.",
            ),
        )
    ]


def snapshot_chain_result(table: CapturedTable) -> AssetCheckResult:
    """A snapshot starts the chain of its table."""
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=CHAIN,
        passed=True,
        description="snapshot: the chain of this table starts here",
    )


def chain_result(
    table: CapturedTable,
    lsn_range: LsnRange,
    ranges: Sequence[LsnRange],
    snapshot: SnapshotInfo | None,
    retired: Lsn | None = None,
) -> AssetCheckResult:
    """``lo`` continues the chain: the previous range ends at ``lo``, or ``lo`` is at or below
    the LSN the table's snapshot replays from, or the ranges before ``lo`` were retired
    (``sync.retain_ranges``) and ended at ``lo``."""
    before = [r for r in ranges if r.lo < lsn_range.lo]
    previous = before[-1] if before else None
    meta = {"lo": lsn_range.lo.hex, "previous_hi": previous.hi.hex if previous else "none"}
    continues = previous is not None and previous.hi == lsn_range.lo
    if previous is None and retired is not None:
        meta["retired_through"] = retired.hex
        continues = lsn_range.lo == retired
    if snapshot is None:
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=CHAIN,
            passed=False,
            severity=AssetCheckSeverity.WARN,
            description="the table has no snapshot yet: materialize its 'snapshot' partition",
            metadata=meta,
        )
    meta["snapshot_replay_from"] = snapshot.replay_from.hex
    if lsn_range.lo <= snapshot.replay_from or continues:
        return AssetCheckResult(
            asset_key=table.change_log_key, check_name=CHAIN, passed=True, metadata=meta
        )
    since = previous.hi if previous else retired or snapshot.replay_from
    why = (
        f"range {lsn_range.key} overlaps the previous range {previous.key}"
        if previous is not None and previous.hi > lsn_range.lo
        else f"the changes between {since.hex} and {lsn_range.lo.hex} are in no partition"
    )
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=CHAIN,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=f"{why}; the mirror will not apply this range. Delete the partition key and "
        "let the sync sensor plan the next range from the end of the chain.",
        metadata=meta,
    )


def unavailable_result(
    conn: DbapiConnection, table: CapturedTable, instance: CaptureInstance, lsn_range: LsnRange
) -> AssetCheckResult | None:
    """A failed coverage check if the range is not inside the validity interval before the read
    (cleanup already removed changes above ``lo``, or capture has not reached ``hi``)."""
    try:
        check_range_available(conn, instance.name, lsn_range)
    except LsnNotAvailable as exc:
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=COVERAGE,
            passed=False,
            severity=AssetCheckSeverity.ERROR,
            description=f"{exc.message} Nothing was written for this range and the mirror is "
            "not touched. Re-snapshot the table (materialize its 'snapshot' partition) to "
            "continue without loss.",
            metadata={
                "lo_plus_1": lsn_range.first.hex,
                "hi": lsn_range.hi.hex,
                "min_lsn": exc.minimum.hex if exc.minimum else "unknown",
                "max_lsn": exc.maximum.hex if exc.maximum else "unknown",
                "capture_instance": instance.name,
            },
        )
    return None


def schema_change_result(
    found: SourceTable | None,
    table: CapturedTable,
    snapshot: SnapshotInfo | None,
    lsn_range: LsnRange,
) -> AssetCheckResult | None:
    """A failed coverage check when a newer capture instance (a schema change) started inside
    or before the range while the table's snapshot was taken with an older one.

    The new instance's extra columns have no values for rows that did not change since, so
    the table is re-snapshotted with it (``sync.on_gap``) instead of mixing the two."""
    if snapshot is None or not snapshot.capture_instance:
        return None
    current = found.current_instance if found is not None else None
    if (
        current is None
        or current.name == snapshot.capture_instance
        or current.start_lsn is None
        or current.start_lsn > lsn_range.hi
    ):
        return None
    old = found.instance(snapshot.capture_instance) if found is not None else None
    added = sorted(set(current.column_names) - set(old.column_names if old else ()))
    dropped = sorted(set(old.column_names if old else ()) - set(current.column_names))
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=f"schema change: capture instance {current.name} (from "
        f"{current.start_lsn.hex}) replaced {snapshot.capture_instance}"
        + (f"; columns added: {', '.join(added)}" if added else "")
        + (f"; columns dropped: {', '.join(dropped)}" if dropped else "")
        + ". Nothing was written for this range; the table is re-snapshotted with the new "
        "instance (sync.on_gap = resnapshot) and its mirror rebuilt with the new columns.",
        metadata={
            "previous_instance": snapshot.capture_instance,
            "new_instance": current.name,
            "new_instance_start_lsn": current.start_lsn.hex,
            "columns_added": ", ".join(added) or "none",
            "columns_dropped": ", ".join(dropped) or "none",
        },
    )


def quiet_coverage_result(table: CapturedTable, lsn_range: LsnRange) -> AssetCheckResult:
    """``coverage`` of a range recorded quiet: no change rows in it, counted while the validity
    interval held it (:mod:`.sync.quiet_ranges`)."""
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=True,
        description="quiet: no change rows in the range, counted inside the validity interval",
        metadata={"lo_plus_1": lsn_range.first.hex, "hi": lsn_range.hi.hex},
    )


def coverage_result(table: CapturedTable, properties: dict[str, Any]) -> AssetCheckResult:
    found = range_of(properties)
    coverage = found.coverage if found is not None else None
    if found is None or coverage is None:  # the snapshot starts the coverage of the chain
        return AssetCheckResult(
            asset_key=table.change_log_key,
            check_name=COVERAGE,
            passed=True,
            description="snapshot: the chain starts here",
            metadata={
                "replay_from": properties["replay_from"],
                "snapshot_lsn": properties["snapshot_lsn"],
            },
        )
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=coverage.ok,
        severity=AssetCheckSeverity.ERROR,
        description=(
            "the range was read inside the validity interval"
            if coverage.ok
            else f"{coverage.reason}. The mirror is not touched. Re-snapshot the table "
            "(materialize its 'snapshot' partition) to continue without loss."
        ),
        metadata={
            "lo_plus_1": found.lsn_range.lo.hex,
            "hi": found.lsn_range.hi.hex,
            "min_lsn_after_read": coverage.min_lsn.hex if coverage.min_lsn else None,
            "max_lsn_after_read": coverage.max_lsn.hex if coverage.max_lsn else None,
        },
    )
