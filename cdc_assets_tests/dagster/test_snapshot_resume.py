"""A table's snapshot written a batch of chunks per commit, killed at several points, resumes
from its last committed batch; a new snapshot request does not resume a stale unfinished one.

The kills are real (SIGKILL of the run process, :mod:`.kill_runner`): inside a chunk's Spark
task, after a batch was read and before its commit, right after a commit. After each kill the
unfinished snapshot is no snapshot for anyone (the store, the sync state, the sensor, which asks
for the table's snapshot again), and the next run reads only the chunks after the last committed
one: what each run read is recorded chunk by chunk, so the test sees that the rows read again are
at most the batch in flight. The finished snapshot is one partition with every key once, and
the mirror built from it (with the changes written between the kills) equals the source table.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DagsterRunStatus, Failure, RunRequest, instance_for_test
from pyspark.sql import SparkSession

from cdc_assets.dagster import mirror
from cdc_assets.dagster.demo.run_lines import progress_lines
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.change_log_state import snapshot_info
from cdc_assets.dagster.sync.names import RESNAPSHOT_TAG, SNAPSHOT_PARTITION, SOURCE_TAG
from cdc_assets.dagster.sync.snapshot_resume import resume_decision
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.emulator import faults
from cdc_assets.lsn import Lsn
from cdc_assets.spark import snapshot_chunks, sqlserver_source
from cdc_assets.spark.partition_rows import PARTITION_COLUMN, PROPERTIES_COLUMN
from cdc_assets.spark.snapshot_chunks import SnapshotProgress, SnapshotReplaced
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.key_values import decode_key, encode_key
from cdc_assets.workload import small_tables

from . import test_kill_faults as kills
from .conftest import (
    SOURCE,
    SyncHarness,
    assert_small_mirrors_equal,
    assert_succeeded,
    make_harness,
)

ROWS = 500
CHUNK_ROWS = 50  # 10 chunks
PER_COMMIT = 2  # 5 commits


def _config(harness: SyncHarness, tmp_path: Path) -> dict[str, Any]:
    return {
        "sources": [
            {
                "name": SOURCE,
                "connection": {"emulator": {"path": str(harness.db)}},
                "sync": {"max_transactions_per_range": 10_000},
                "snapshot": {"chunk_rows": CHUNK_ROWS, "chunks_per_commit": PER_COMMIT},
            }
        ],
        "storage": {"base_path": str(harness.source.storage)},
        "spark": {"master": "local[2]"},
    }


def _unfinished(harness: SyncHarness) -> SnapshotProgress:
    table = harness.source.tables[0]
    path = table.change_log_key.path
    assert harness.source.store.properties(path, SNAPSHOT_PARTITION) is None  # not published
    assert snapshot_info(harness.source, table) is None
    assert SourceSync.load(harness.source)[table].snapshot is None
    progress = SnapshotProgress.from_properties(
        harness.source.store.written_properties(path, SNAPSHOT_PARTITION)
    )
    assert progress is not None
    return progress


def _reads(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _snapshot_request(harness: SyncHarness, monkeypatch: pytest.MonkeyPatch) -> RunRequest:
    """The sensor's request once the killed run is marked failed: the table's snapshot again."""
    runs = harness.instance.get_runs(limit=1)
    if runs and runs[0].status == DagsterRunStatus.STARTED:
        waiting = harness.tick()
        assert not waiting.run_requests and "in progress" in (waiting.skip_message or "")
        harness.instance.report_run_failed(runs[0])
    with monkeypatch.context() as patch:
        patch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
        data = harness.tick()
    (request,) = data.run_requests
    assert request.partition_key == SNAPSHOT_PARTITION
    return request


def _write_some(harness: SyncHarness, steps: int = 6) -> None:
    for _ in range(steps):
        harness.workload.step()
    harness.capture()


def test_a_snapshot_killed_at_each_point_resumes_to_the_source(
    tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dagster").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        _killed_and_resumed(tmp_path, spark, instance, monkeypatch)


def _killed_and_resumed(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        rows=ROWS,
        tables=small_tables(1),
        chunk_rows=CHUNK_ROWS,
        chunks_per_commit=PER_COMMIT,
    )
    table = harness.source.tables[0]
    raw = _config(harness, tmp_path)
    # (stage, nth, chunks committed once the run is killed)
    plan = [("chunk_task", 2, 2), ("chunk_read", 2, 4), ("chunk_committed", 1, 6)]
    started = {stage: _start(tmp_path, raw, instance, stage, nth) for stage, nth, _ in plan[:2]}
    request = harness.tick().run_requests[0]
    committed_before = 0
    write_id = None
    last_key: tuple[Any, ...] | None = None
    for index, (stage, _nth, committed) in enumerate(plan):
        run = started.pop(stage)
        kills._run_killed(run, request)
        if index + 2 < len(plan):  # the next but one starts while this one is checked
            stage_next, nth_next, _ = plan[index + 2]
            started[stage_next] = _start(tmp_path, raw, instance, stage_next, nth_next)
        progress = _unfinished(harness)
        assert progress.chunks_done == committed, (stage, progress)
        assert progress.resumes == index
        write_id = write_id or progress.write_id
        assert progress.write_id == write_id  # one snapshot, resumed
        reads = _reads(tmp_path / f"reads-{stage}.jsonl")
        # the run read whole the chunks it committed and at most the batch in flight besides
        assert committed - committed_before <= len(reads) <= committed - committed_before + 2
        # ... starting after the last key the previous run committed: nothing read again
        afters = [decode_key(r["after"]) if r["after"] else None for r in reads]
        lowest = None if None in afters else min(a for a in afters if a is not None)
        assert lowest == last_key, (stage, afters, last_key)
        last_key, committed_before = progress.last_key, committed
        _write_some(harness)  # the table changes between the runs
        request = _snapshot_request(harness, monkeypatch)

    # The last run, in this process, finishes the snapshot from the last committed chunk.
    result = harness.execute(request)
    assert_succeeded(result)
    assert f"resumes after chunk {committed_before}" in _log(harness, result)
    path = table.change_log_key.path
    properties = harness.source.store.properties(path, SNAPSHOT_PARTITION)
    assert (
        properties is not None and "in_progress" not in properties and "last_key" not in properties
    )
    assert properties["write_id"] == write_id and properties["resumes"] == len(plan)
    assert properties["chunks_done"] >= 10
    observations = [
        e.event_specific_data.asset_observation.metadata
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    assert observations
    read_by_last_run = observations[-1]["snapshot_rows_read"].value
    # the last run read only the chunks after the last key committed before it
    assert read_by_last_run == properties["rows"] - _rows_up_to(harness, last_key)
    # every key once, as many rows as the properties say
    data = harness.source.store.read(spark, path, SNAPSHOT_PARTITION)
    keys = [r["id"] for r in data.where("`__$snapshot_lsn` IS NULL").select("id").collect()]
    assert len(keys) == len(set(keys)) == properties["rows"]
    assert snapshot_info(harness.source, table) is not None
    # the mirror: the snapshot with the changes since its lowest low watermark
    _write_some(harness)
    harness.sync()
    assert_small_mirrors_equal(harness)
    harness.assert_mirrors_equal_source()


def _rows_up_to(harness: SyncHarness, key: tuple[Any, ...] | None) -> int:
    """The rows of the snapshot partition whose key is at or below ``key``."""
    if key is None:
        return 0
    path = harness.source.tables[0].change_log_key.path
    rows = harness.source.store.read(harness.spark, path, SNAPSHOT_PARTITION)
    return rows.where(f"`__$snapshot_lsn` IS NULL AND id <= {int(key[0])}").count()


def _start(
    tmp_path: Path, raw: dict[str, Any], instance: DagsterInstance, stage: str, nth: int
) -> kills.KilledRun:
    """A run process waiting to die at ``stage``, its chunk reads recorded in a file."""
    reads = tmp_path / f"reads-{stage}.jsonl"
    return kills._start(tmp_path, raw, instance, stage, nth=nth, extra={"reads": str(reads)})


def _lost_after_one(why: str) -> Any:
    """``append_chunks`` that commits the first batch and fails the second (the run's end)."""
    real = snapshot_chunks.append_chunks
    calls = {"n": 0}

    def append_chunks(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError(why)
        return real(*args, **kwargs)

    return append_chunks


def test_an_unfinished_snapshot_is_none_a_new_request_starts_over_a_plain_one_resumes(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished snapshot written in several commits; a re-snapshot interrupted after its first
    commit (an exception: the driver lost) replaced it and is no snapshot to any reader; a run
    asking for a snapshot of its own (another re-snapshot reason) discards it; its own snapshot,
    interrupted by the source connection dropping in a chunk's Spark task, is then resumed by
    the sensor's plain request, with progress lines, and the mirror equals the source."""
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        rows=200,
        tables=small_tables(1),
        chunk_rows=50,
        chunks_per_commit=1,
    )
    harness.sync()
    table = harness.source.tables[0]
    path = table.change_log_key.path
    finished = harness.source.store.properties(path, SNAPSHOT_PARTITION)
    assert finished is not None and finished["chunks_done"] >= 4
    assert SourceSync.load(harness.source)[table].snapshot is not None
    rows = harness.source.store.read(spark, path, SNAPSHOT_PARTITION).count()
    stored = spark.read.format("delta").load(harness.source.store.location(path))
    markers = stored.where(f"{PARTITION_COLUMN} = 'snapshot' AND {PROPERTIES_COLUMN} IS NOT NULL")
    assert markers.count() == finished["commit_seq"] + 1  # a properties row per commit

    by_hand = RunRequest(
        partition_key=SNAPSHOT_PARTITION, tags={SOURCE_TAG: SOURCE, RESNAPSHOT_TAG: "by hand"}
    )
    with monkeypatch.context() as patch:
        patch.setattr(snapshot_chunks, "append_chunks", _lost_after_one("connection dropped"))
        assert not harness.execute(by_hand).success
    first = _unfinished(harness)  # the old snapshot is gone, the new one not there yet
    assert first.chunks_done == 1 and first.properties["reason"] == "by hand"
    assert harness.source.store.read(spark, path, SNAPSHOT_PARTITION).count() < rows
    # a range run's mirror step leaves the mirror as it is, saying why
    with pytest.raises(Failure, match="its snapshot is under way \\(1 chunks"):
        mirror._mirror_output(spark, harness.source, table, lambda _: [], Lsn.ZERO, None, None)
    # a run that still writes an older snapshot of the table stops at its next commit
    older = replace(first, write_id="an older run's", commit_seq=0)
    plan = sqlserver_source.plan_snapshot(
        harness.source.config.connection_settings(), table.instance, after=older.last_key
    )
    with pytest.raises(SnapshotReplaced, match="another snapshot of this table"):
        snapshot_chunks.write_in_chunks(
            spark,
            harness.source.store,
            path,
            SNAPSHOT_PARTITION,
            plan,
            identity={},
            write_id=older.write_id,
            resume=older,
        )

    again = RunRequest(
        partition_key=SNAPSHOT_PARTITION,
        tags={SOURCE_TAG: SOURCE, RESNAPSHOT_TAG: "read it again, the source was restored"},
    )
    # this time the source connection drops inside the second chunk's Spark task (the first
    # chunk's read has no lower key bound)
    faults.inject(harness.db, faults.Fault("dropped", after_rows=5, match="WHERE (([id] > ?))"))
    result = harness.execute(again)
    assert faults.remaining(harness.db) == []  # it fired
    assert not result.success
    second = _unfinished(harness)
    assert second.write_id != first.write_id and second.resumes == 0
    assert second.properties["reason"] == "read it again, the source was restored"
    assert "starts over from the first key: this run asks for a new snapshot" in _log(
        harness, result
    )

    _write_some(harness)
    resumed = harness.execute(_snapshot_request(harness, monkeypatch))
    assert_succeeded(resumed)
    assert "resumes after chunk 1" in _log(harness, resumed)
    # make demo's terminal: a line per commit, with rows done and expected, chunks, time left
    lines, _cursor = progress_lines(harness.instance, resumed.run_id)
    assert len(lines) >= 2, lines  # the chunks after the first, one commit each
    assert lines[0].startswith("run snapshot (running): [dbo].[t0000] snapshot: ")
    assert " of ~" in lines[0] and "2 of " in lines[0] and " left" in lines[0], lines
    assert lines[-1].endswith(", complete") and " chunks" in lines[-1], lines
    done = harness.source.store.properties(path, SNAPSHOT_PARTITION)
    assert done is not None
    assert done["write_id"] == second.write_id and done["resumes"] == 1
    (materialization,) = [
        e.event_specific_data.materialization
        for e in resumed.all_events
        if e.event_type_value == "ASSET_MATERIALIZATION"
        and e.event_specific_data.materialization.asset_key.path[0] == "cdc"
    ]
    metadata = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    assert metadata["dagster/row_count"] == done["rows"]
    assert metadata["snapshot_resumes"] == 1 and metadata["snapshot_chunks"] >= 4
    assert metadata["snapshot_commits"] == done["commit_seq"] + 1
    assert metadata["snapshot_rows_expected"] > 0
    harness.capture()  # past the snapshot's watermarks: the next range rebuilds the mirror
    harness.sync()
    assert_small_mirrors_equal(harness)


def _log(harness: SyncHarness, result: Any) -> str:
    """The run's log lines (``context.log``), as the UI shows them."""
    return " | ".join(e.user_message for e in harness.instance.all_logs(result.run_id))


def _instance(*, keyed: bool = True, name: str = "dbo_t", start: int = 100) -> CaptureInstance:
    return CaptureInstance(
        name=name,
        source_schema="dbo",
        source_table="t",
        start_lsn=Lsn.from_int(start),
        supports_net_changes=keyed,
        columns=(),
        key_columns=("id",) if keyed else (),
        create_date=dt.datetime(2026, 1, 1),
    )


def _progress(**overrides: Any) -> SnapshotProgress:
    properties = {
        "in_progress": True,
        "write_id": "w",
        "commit_seq": 2,
        "chunks_done": 6,
        "last_key": encode_key((600,)),
        "replay_from": Lsn.from_int(1000).hex,
        "snapshot_lsn": Lsn.from_int(2000).hex,
        "rows": 600,
        "capture_instance": "dbo_t",
        "capture_instance_start": Lsn.from_int(100).hex,
        "reason": "initial snapshot",
        **overrides,
    }
    progress = SnapshotProgress.from_properties(properties)
    assert progress is not None
    return progress


@pytest.mark.parametrize(
    ("instance", "min_lsn", "reason", "starts_over_because"),
    [
        (_instance(), 500, None, None),
        (_instance(), 1000, "initial snapshot", None),  # a re-execution of the same request
        (_instance(name="dbo_t_v2"), 500, None, "captured by dbo_t_v2"),
        (_instance(start=300), 500, None, "captured by dbo_t"),  # enabled again, same name
        (_instance(), 1200, None, "cleanup moved the min LSN"),
        (_instance(keyed=False), 500, None, "no key"),
        (_instance(), 500, "a gap in range x", "asks for a new snapshot"),
    ],
)
def test_resume_rule(
    instance: CaptureInstance, min_lsn: int, reason: str | None, starts_over_because: str | None
) -> None:
    resumed, line = resume_decision(_progress(), instance, Lsn.from_int(min_lsn), reason)
    assert line is not None
    if starts_over_because is None:
        assert resumed is not None and "resumes after chunk 6" in line
    else:
        assert resumed is None and starts_over_because in line, line
    assert resume_decision(None, instance, Lsn.from_int(min_lsn), reason) == (None, None)
