"""The typed records read what the stores wrote before them, and write it byte for byte."""

from __future__ import annotations

from cdc_assets.lsn import Lsn
from cdc_assets.records import MirrorPosition
from cdc_assets.spark.commit_metadata import to_json
from cdc_assets.spark.mirror_versions import position_of, position_properties

# a mirror's commit properties as the mirror step wrote them before the records (a merge: no
# row count, which the MERGE's metrics give after the commit)
MERGED = {
    "applied_ranges": ["0000000000000000000a-00000000000000000014"],
    "as_of_commit_time": "2026-11-29T03:00:00",
    "columns": ["id", "name"],
    "kind": "mirror",
    "lag_at_read_seconds": 0.5,
    "lsn": Lsn.from_int(20).hex,
    "previous_lsn": Lsn.from_int(10).hex,
    "read_at": "2026-11-29T03:00:01+00:00",
    "rebuilt_from_snapshot": False,
    "replay_from": Lsn.from_int(5).hex,
    "snapshot_lsn": Lsn.from_int(5).hex,
    "snapshot_version": "abc",
}


def test_a_merge_commit_reads_as_a_position() -> None:
    position = position_of(MERGED)
    assert position == MirrorPosition(
        lsn=Lsn.from_int(20),
        snapshot_version="abc",
        rows=None,
        commit_lsn=Lsn.from_int(20),
        commit_time="2026-11-29T03:00:00",
        columns=("id", "name"),
    )
    assert position.built_from("abc") and not position.built_from("other")


def test_a_rebuild_commit_has_its_rows_and_no_commit_time() -> None:
    position = position_of({"lsn": Lsn.from_int(7).hex, "snapshot_version": "v", "rows": 3})
    assert position is not None
    assert (position.rows, position.commit_time, position.columns) == (3, None, None)


def test_no_properties_no_position_and_no_lsn_no_place() -> None:
    assert position_of(None) is None and position_of({}) is None
    position = position_of({"snapshot_version": "v", "rows": "?"})
    assert position is not None and position.lsn is None and position.rows is None
    assert not position.built_from("v")


def test_a_position_is_stored_as_before() -> None:
    position = position_of(MERGED)
    assert position is not None
    stored = position_properties(position)
    assert stored == {k: MERGED[k] for k in ("lsn", "snapshot_version", "as_of_commit_time")} | {
        "columns": ["id", "name"]
    }
    rest = {k: v for k, v in MERGED.items() if k not in stored}
    assert to_json({**rest, **stored}) == to_json(MERGED)  # the same userMetadata, byte for byte
    assert position_of({**rest, **stored}) == position
