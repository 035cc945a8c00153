"""Sensor evaluations that overlap (two daemons, a tick and a manual evaluation) or a daemon that
dies between adding a range and launching its run: the chain stays one contiguous line of ranges,
no two of them overlap, and the same run is never asked for under two run keys."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
from dagster import RunRequest

from cdc_assets.dagster import range_lane
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.names import partitions_name
from cdc_assets.lsn import Lsn

from .conftest import SOURCE, SyncHarness, failure_text


def _ranges(harness: SyncHarness) -> list[Any]:
    return range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))


def _assert_tiled(harness: SyncHarness) -> None:
    ranges = _ranges(harness)
    for a, b in itertools.pairwise(ranges):
        assert a.hi == b.lo, f"{a.key} and {b.key} overlap or leave a gap"


def _steady(harness: SyncHarness) -> None:
    harness.sync()
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    harness.sync()


def _max_lsn_moving_on(harness: SyncHarness) -> Callable[[Any], Lsn]:
    """``get_max_lsn`` that commits and captures one more transaction right after it reads, so
    each evaluation sees a different max LSN, and then dawdles to widen the race window."""
    real = range_lane.get_max_lsn
    writing = threading.Lock()
    event = threading.Event()

    def moving(conn: Any) -> Lsn:
        with writing:
            maximum = real(conn)
            harness.workload.step()
            harness.capture()
        event.wait(0.5)
        return maximum

    return moving


def test_two_racing_evaluations_add_one_range_and_ask_for_one_run(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    _steady(harness)
    before = _ranges(harness)
    for _ in range(10):
        harness.workload.step()
    harness.capture()
    monkeypatch.setattr(range_lane, "get_max_lsn", _max_lsn_moving_on(harness))

    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(harness.evaluate())) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 2
    monkeypatch.undo()

    added = [r for r in _ranges(harness) if r not in before]
    assert len(added) == 1, f"racing evaluations added {[r.key for r in added]}"
    _assert_tiled(harness)
    requests: list[RunRequest] = [r for data in results for r in data.run_requests]
    assert {r.partition_key for r in requests} == {added[0].key}
    assert {r.run_key for r in requests} == {f"{added[0].key}#0"}  # Dagster launches one run

    result = harness.execute(requests[0])  # the daemon launches one run per run key
    assert result.success, failure_text(result)
    harness.capture()
    harness.sync()
    harness.assert_mirrors_equal_source()
    _assert_tiled(harness)


def test_a_range_added_by_a_tick_that_died_before_its_run_is_picked_up(
    harness: SyncHarness,
) -> None:
    _steady(harness)
    for _ in range(10):
        harness.workload.step()
    harness.capture()
    lost = harness.tick().run_requests[0]  # the daemon dies: this run is never launched
    harness.cursor = None  # and the restarted daemon has no cursor
    again = harness.tick().run_requests
    assert [(r.partition_key, r.run_key) for r in again] == [(lost.partition_key, lost.run_key)]
    result = harness.execute(again[0])
    assert result.success, failure_text(result)
    # the range is complete: nothing more to ask for
    assert harness.tick().run_requests == []
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    harness.sync()
    harness.assert_mirrors_equal_source()
    _assert_tiled(harness)
