"""No whole-run waits (issue 40): the next range's run is asked for while the previous range run
is in flight, starts, and waits in its steps until that run has finished, so every table applies
its ranges in order; at most two range runs of a source are in flight."""

from __future__ import annotations

import threading
import time

import pytest
from dagster import DagsterRunStatus, ExecuteInProcessResult, RunRequest

from cdc_assets.dagster import mirror
from cdc_assets.dagster.sync.names import RANGE_LANE_TAG, SNAPSHOT_PARTITION
from cdc_assets.lsn import LsnRange

from .conftest import SyncHarness, assert_succeeded, hold


def _changes(harness: SyncHarness, steps: int = 6) -> None:
    for _ in range(steps):
        harness.workload.step()
    harness.workload.touch_every_table()
    harness.capture()


def _in_thread(harness: SyncHarness, request: RunRequest) -> tuple[threading.Thread, dict]:
    outcome: dict[str, ExecuteInProcessResult] = {}
    thread = threading.Thread(target=lambda: outcome.update(result=harness.execute(request)))
    thread.start()
    return thread, outcome


def test_the_next_range_run_starts_while_the_previous_one_works_and_waits_for_it(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sync()
    _changes(harness)
    harness.sync()
    harness.assert_mirrors_equal_source()

    # the first range run is held in its mirrors step
    held = hold(monkeypatch, mirror, "_mirror_output", "the first run")
    _changes(harness)
    (first,) = harness.tick().run_requests
    assert first.tags[RANGE_LANE_TAG] == harness.source.name
    first_thread, first_outcome = _in_thread(harness, first)
    second_thread: threading.Thread | None = None
    try:
        assert held.reached.wait(300), "the first run did not reach its mirrors"
        monkeypatch.setattr(mirror, "_mirror_output", held.real)
        # a tick with nothing new captured asks for nothing and says why
        idle = harness.tick()
        assert not idle.run_requests and "in progress" in (idle.skip_message or "")

        _changes(harness)
        (second,) = harness.tick().run_requests  # asked for while the first is in flight
        assert second.partition_key != SNAPSHOT_PARTITION
        one = LsnRange.parse_key(first.partition_key or "")
        two = LsnRange.parse_key(second.partition_key or "")
        assert two.lo == one.hi, "the next range continues the chain"
        second_thread, second_outcome = _in_thread(harness, second)
        # it starts, then waits for the first: nothing of its range is written meanwhile
        deadline = time.monotonic() + 120
        run = None
        while time.monotonic() < deadline:
            runs = [
                r
                for r in harness.instance.get_runs()
                if r.tags.get("dagster/partition") == second.partition_key
            ]
            run = runs[0] if runs else None
            if run is not None and run.status == DagsterRunStatus.STARTED:
                break
            time.sleep(0.2)
        assert run is not None and run.status == DagsterRunStatus.STARTED
        time.sleep(3.0)
        assert second_thread.is_alive()
        assert not any(
            harness.source.store.is_published(t.change_log_key.path, second.partition_key)
            for t in harness.source.tables
        ), "the second run wrote before the first finished"
        # two range runs in flight: the sensor asks for no third
        full = harness.tick()
        assert not full.run_requests and "in progress" in (full.skip_message or "")
    finally:
        held.release.set()
        first_thread.join(600)
        if second_thread is not None:
            second_thread.join(600)
    assert_succeeded(first_outcome["result"])
    result = second_outcome["result"]
    assert_succeeded(result)
    logged = " ".join(e.message for e in harness.instance.all_logs(result.run_id) if e.message)
    assert "waiting for the earlier range run(s)" in logged
    assert harness.assert_mirrors_equal_source() == two.hi
    harness.sync()  # the changes made meanwhile
    harness.assert_mirrors_equal_source()
