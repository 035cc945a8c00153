"""A change-log partition's properties read as records and written as before, byte for byte."""

from __future__ import annotations

from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.records import Coverage, Gap, RangeProperties
from cdc_assets.spark.change_log_properties import (
    gap_of,
    gap_properties,
    range_of,
    range_properties,
)
from cdc_assets.spark.commit_metadata import to_json

# a range partition's properties as the change-log step wrote them before the records
WRITTEN = {
    "kind": "range",
    "capture_instance": "dbo_orders",
    "lo": Lsn.from_int(10).hex,
    "hi": Lsn.from_int(20).hex,
    "read_from": Lsn.from_int(12).hex,
    "rows": 3,
    "operations": {"insert": 2, "delete": 1},
    "transactions": 2,
    "first_commit": "2026-11-29T03:00:00",
    "last_commit": "2026-11-29T03:00:05",
    "lag_seconds": 1.25,
    "read_at": "2026-11-29T03:00:06+00:00",
    "columns_not_captured": ["note"],
    "coverage": {
        "ok": False,
        "min_lsn": Lsn.from_int(11).hex,
        "max_lsn": Lsn.from_int(30).hex,
        "reason": "cleanup moved the min LSN",
    },
}


def test_a_range_partition_reads_as_a_record() -> None:
    assert range_of(WRITTEN) == RangeProperties(
        lsn_range=LsnRange(Lsn.from_int(10), Lsn.from_int(20)),
        capture_instance="dbo_orders",
        read_from=Lsn.from_int(12),
        rows=3,
        operations={"insert": 2, "delete": 1},
        transactions=2,
        first_commit="2026-11-29T03:00:00",
        last_commit="2026-11-29T03:00:05",
        lag_seconds=1.25,
        read_at="2026-11-29T03:00:06+00:00",
        columns_not_captured=("note",),
        coverage=Coverage(False, Lsn.from_int(11), Lsn.from_int(30), "cleanup moved the min LSN"),
    )


def test_a_range_partition_is_written_as_before() -> None:
    record = range_of(WRITTEN)
    assert record is not None
    assert to_json(range_properties(record)) == to_json(WRITTEN)
    stamped = {**WRITTEN, "write_id": "abc", "stored_columns": ["id"]}  # the store's own keys
    assert range_of(stamped) == record


def test_properties_without_a_range_or_coverage() -> None:
    assert range_of(None) is None and range_of({}) is None
    assert (
        range_of({"replay_from": Lsn.from_int(1).hex, "snapshot_lsn": Lsn.from_int(1).hex}) is None
    )
    sparse = range_of({"lo": Lsn.from_int(1).hex, "hi": Lsn.from_int(2).hex, "rows": "?"})
    assert sparse is not None and sparse.coverage is None and sparse.rows is None
    quick = range_of(
        {"lo": Lsn.from_int(1).hex, "hi": Lsn.from_int(2).hex, "coverage": {"ok": True}}
    )
    assert quick is not None and quick.coverage == Coverage(True)


def test_a_gap_reads_and_writes_as_before() -> None:
    stored = {"reason": "changes were removed", "snapshot_version": None, "run_id": "r1"}
    gap = gap_of(stored)
    assert gap == Gap("changes were removed", None, "r1")
    assert gap_properties(gap) == stored
    assert gap_of(None) is None
    assert gap_of({"reason": "cleanup"}) == Gap("cleanup", None, None)
