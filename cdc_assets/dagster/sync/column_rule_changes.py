"""A table whose column rules changed since its snapshot is re-snapshotted, and says why.

The stored values of a table were produced under the rules its snapshot was read with (their
fingerprint is in the snapshot partition's properties, :func:`~cdc_assets.sqlserver.column_masks.
rules_fingerprint`). A range read under other rules would mix the two in the change log and the
mirror, so it is refused like a schema change: nothing is written, the ``coverage`` check fails
with this line, and the gap tells the sensor to re-snapshot the table (``sync.on_gap``).
"""

from __future__ import annotations

from dagster import AssetCheckResult, AssetCheckSeverity

from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.column_masks import rules_fingerprint

from .chain import SnapshotInfo
from .metadata import column_rules_text
from .names import COVERAGE
from .source import CapturedTable


def rules_change_result(
    table: CapturedTable, instance: CaptureInstance, snapshot: SnapshotInfo | None
) -> AssetCheckResult | None:
    """A failed coverage check when ``instance`` (read with the rules now configured) is read
    under other column rules than ``snapshot`` was; None when they are the same."""
    if snapshot is None:
        return None
    now = rules_fingerprint(instance)
    if now == snapshot.column_rules:
        return None
    return AssetCheckResult(
        asset_key=table.change_log_key,
        check_name=COVERAGE,
        passed=False,
        severity=AssetCheckSeverity.ERROR,
        description=f"column rules changed: {table.qualified_name} was snapshotted under other "
        f"column rules than it is read with now ({column_rules_text(instance)}). Nothing was "
        "written for this range; the table is re-snapshotted under the new rules "
        "(sync.on_gap = resnapshot) and its mirror rebuilt from it.",
        metadata={
            "previous_column_rules": snapshot.column_rules or "none",
            "column_rules": now or "none",
        },
    )
