"""A change-log partition's properties as typed records (:mod:`cdc_assets.records`) and back.

The change log stores a partition's properties as JSON in its properties row
(:mod:`.asset_store`); this module is the one place that knows the keys of a range partition's
properties and of a gap, so partitions written before the records read as they always did and
new ones are written byte for byte as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.records import Coverage, Gap, RangeProperties

RANGE_KIND = "range"  # the ``kind`` of a range partition's properties


def _lsn(value: Any) -> Lsn | None:
    return Lsn.parse(value) if value else None


def coverage_of(stored: Mapping[str, Any] | None) -> Coverage | None:
    """The coverage a range's properties record under ``coverage``; None when they have none."""
    if stored is None:
        return None
    return Coverage(
        ok=bool(stored.get("ok")),
        min_lsn=_lsn(stored.get("min_lsn")),
        max_lsn=_lsn(stored.get("max_lsn")),
        reason=str(stored.get("reason") or ""),
    )


def range_of(properties: Mapping[str, Any] | None) -> RangeProperties | None:
    """The range partition's properties as a record; None without them (or for properties
    without an LSN range: a snapshot's)."""
    if not properties or not properties.get("lo") or not properties.get("hi"):
        return None
    rows = properties.get("rows")
    lag = properties.get("lag_seconds")
    transactions = properties.get("transactions")
    return RangeProperties(
        lsn_range=LsnRange(Lsn.parse(properties["lo"]), Lsn.parse(properties["hi"])),
        capture_instance=properties.get("capture_instance"),
        read_from=_lsn(properties.get("read_from")),
        rows=rows if isinstance(rows, int) else None,
        operations=dict(properties.get("operations") or {}),
        transactions=transactions if isinstance(transactions, int) else None,
        first_commit=properties.get("first_commit"),
        last_commit=properties.get("last_commit"),
        lag_seconds=lag if isinstance(lag, int | float) else None,  # as stored: the same JSON
        read_at=properties.get("read_at"),
        columns_not_captured=tuple(properties.get("columns_not_captured") or ()),
        coverage=coverage_of(properties.get("coverage")),
    )


def range_properties(record: RangeProperties) -> dict[str, Any]:
    """The properties a range partition is published with (what :func:`range_of` reads)."""
    coverage = record.coverage
    return {
        "kind": RANGE_KIND,
        "capture_instance": record.capture_instance,
        "lo": record.lsn_range.lo.hex,
        "hi": record.lsn_range.hi.hex,
        "read_from": record.read_from.hex if record.read_from is not None else None,
        "rows": record.rows,
        "operations": dict(record.operations),
        "transactions": record.transactions,
        "first_commit": record.first_commit,
        "last_commit": record.last_commit,
        "lag_seconds": record.lag_seconds,
        "read_at": record.read_at,
        "columns_not_captured": list(record.columns_not_captured),
        **(
            {}
            if coverage is None
            else {
                "coverage": {
                    "ok": coverage.ok,
                    "min_lsn": coverage.min_lsn.hex if coverage.min_lsn is not None else None,
                    "max_lsn": coverage.max_lsn.hex if coverage.max_lsn is not None else None,
                    "reason": coverage.reason,
                }
            }
        ),
    }


def gap_of(stored: Mapping[str, Any] | None) -> Gap | None:
    """The gap a partition's properties record (what :meth:`.AssetStore.gap` returns)."""
    if stored is None:
        return None
    return Gap(
        stored.get("reason"),
        stored.get("snapshot_version"),
        stored.get("run_id"),
        bool(stored.get("awaits_resnapshot", False)),
    )


def gap_properties(gap: Gap) -> dict[str, Any]:
    """What a partition's properties record of ``gap`` (:meth:`.AssetStore.mark_gap`)."""
    stored = {"reason": gap.reason, "snapshot_version": gap.snapshot_version, "run_id": gap.run_id}
    if gap.awaits_resnapshot:  # a gap that needs a person (or an older one) reads as before
        stored["awaits_resnapshot"] = True
    return stored
