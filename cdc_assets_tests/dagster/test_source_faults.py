"""The source goes away: unreachable when a run or a tick starts, or the connection dropped in
the middle of a read on an executor (snapshot chunk, change range). Injected with
:mod:`cdc_assets.emulator.faults`, which every process opening the database sees.

Each time: the run fails with one clear message (what happened and what to do — not an executor
trace), nothing of the failed read is published, no mirror moves; the sensor retries the same
partition after its pause (no new range, no gap), the retry succeeds, and every mirror equals
its source table.
"""

from __future__ import annotations

import itertools

import pytest
from dagster import DagsterEventType, ExecuteInProcessResult

from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, partitions_name
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.emulator import faults
from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver.quoting import quote_table

from .conftest import SOURCE, SyncHarness, failure_text

EXECUTOR_NOISE = ("Py4JJavaError", "org.apache.spark", "PythonException", "Traceback")


def _step_error(result: ExecuteInProcessResult) -> str:
    """The message of the failed step as the UI shows it (the error's message, no stack)."""
    failures = [e for e in result.all_events if e.event_type == DagsterEventType.STEP_FAILURE]
    assert failures, "the run did not fail a step"
    error = failures[0].step_failure_data.error
    assert error is not None
    return error.message


def _mirror_lsns(harness: SyncHarness) -> dict[CapturedTable, Lsn | None]:
    return {t: mirror_lsn(harness.source, t) for t in harness.source.tables}


def _retry_now(harness: SyncHarness, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """The sensor waits after a failure, then requests the same partition again, and it works."""
    data = harness.tick()
    assert not data.run_requests and "retrying after" in (data.skip_message or "")
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    data = harness.tick()
    assert [r.partition_key for r in data.run_requests] == [key]
    assert data.run_requests[0].run_key == f"{key}#1"  # a new run, not the failed one again
    assert not data.dynamic_partitions_requests  # the same range, not a new one
    result = harness.execute(data.run_requests[0])
    assert result.success, failure_text(result)
    checks = {e.check_name for e in result.get_asset_check_evaluations()}
    # the blocking checks ran (a range run evaluates at_chain_end and capture_health too)
    assert {"coverage", "chain"} <= checks, checks


def _changes(harness: SyncHarness, steps: int) -> None:
    for _ in range(steps):
        harness.workload.step()
    harness.capture()


def _chain_is_contiguous(harness: SyncHarness) -> None:
    keys = harness.instance.get_dynamic_partitions(partitions_name(SOURCE))
    ranges = range_partitions(keys)
    assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges)), ranges


def test_connection_dropped_mid_read_fails_cleanly_and_the_retry_succeeds(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    biggest = max(
        harness.source.tables, key=lambda t: harness.workload.row_count(f"{t.schema}.{t.name}")
    )

    # 1. dropped while an executor reads a snapshot chunk
    instance = biggest.instance
    table_sql = quote_table(instance.source_schema, instance.source_table)
    faults.inject(harness.db, faults.Fault("dropped", after_rows=5, match=table_sql))
    data = harness.tick()
    assert data.run_requests[0].partition_key == SNAPSHOT_PARTITION
    result = harness.execute(data.run_requests[0])
    assert not result.success
    message = _step_error(result)
    assert "reading the source failed (SourceUnreachable)" in message, message
    assert "forcibly closed" in message and "retries the range" in message, message
    assert not any(noise in message for noise in EXECUTOR_NOISE), message
    assert faults.remaining(harness.db) == []  # it fired
    assert not harness.source.store.is_published(biggest.change_log_key.path, SNAPSHOT_PARTITION)
    _retry_now(harness, monkeypatch, SNAPSHOT_PARTITION)
    monkeypatch.undo()
    _changes(harness, 5)  # the mirrors start with the first range past the snapshot
    harness.sync()
    before = harness.assert_mirrors_equal_source()

    # 2. dropped while an executor reads the change rows of a range
    _changes(harness, 60)
    # the executor's read of the change rows (not the driver's count of changed tables, which
    # names every change table too)
    read = f"FROM {biggest.instance.change_table} AS ct"
    faults.inject(harness.db, faults.Fault("dropped", after_rows=3, match=read))
    data = harness.tick()
    key = data.run_requests[0].partition_key
    result = harness.execute(data.run_requests[0])
    assert not result.success
    message = _step_error(result)
    assert "forcibly closed" in message and biggest.change_log_key.to_user_string() in message
    assert not any(noise in message for noise in EXECUTOR_NOISE), message
    assert faults.remaining(harness.db) == []
    assert not harness.source.store.is_published(biggest.change_log_key.path, key)
    assert set(_mirror_lsns(harness).values()) == {before}  # no mirror moved
    _retry_now(harness, monkeypatch, key)
    harness.sync()
    assert harness.assert_mirrors_equal_source() > before
    _chain_is_contiguous(harness)


def test_unreachable_source_skips_the_tick_fails_the_run_then_sync_resumes(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sync()
    _changes(harness, 5)
    harness.sync()
    before = harness.assert_mirrors_equal_source()
    _changes(harness, 30)

    faults.inject(harness.db, faults.Fault("unreachable", times=1000))
    skipped = harness.tick()  # the tick must ask the source for its max LSN: it skips, saying why
    assert skipped.run_requests == []
    reason = skipped.skip_message or ""
    assert reason.startswith(f"source '{SOURCE}' is unreachable: "), reason
    assert "actively refused" in reason and "Hint: Check server" in reason, reason
    faults.clear(harness.db)
    request = harness.tick().run_requests[0]
    faults.inject(harness.db, faults.Fault("unreachable", times=1000))
    result = harness.execute(request)
    assert not result.success
    message = _step_error(result)
    assert f"Failure: source {SOURCE}: TCP Provider: No connection could be made" in message
    assert "Hint: Check server, port/instance" in message
    for table in harness.source.tables:
        assert not harness.source.store.is_published(
            table.change_log_key.path, request.partition_key
        )
    assert set(_mirror_lsns(harness).values()) == {before}

    faults.clear(harness.db)  # the server is back
    _retry_now(harness, monkeypatch, request.partition_key)
    harness.sync()
    assert harness.assert_mirrors_equal_source() > before
    _chain_is_contiguous(harness)
