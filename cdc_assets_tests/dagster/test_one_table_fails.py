"""One table never holds back the others (docs/design.md section 8): a table whose range cannot
be written stays where it was while the others commit the range and the next ones; once its
pause is over, the sensor brings it up from where it stopped, one range at a time, its own chain
whole, and the source is one chain again."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dagster import DagsterRunStatus, RunRequest

from cdc_assets.dagster import change_log
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.names import (
    CATCH_UP_TAG,
    PARTITION_RUN_TAG,
    SNAPSHOT_OF_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
)
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.lsn import LsnRange

from .conftest import QUIET, SOURCE, SyncHarness, failure_text


def _changes(harness: SyncHarness, steps: int = 8) -> None:
    """Random transactions, and one that changes every table: a range runs only the tables
    that changed in it, and this test wants them all in each range."""
    for _ in range(steps):
        harness.workload.step()
    harness.workload.touch_every_table()
    harness.capture()


def _run(harness: SyncHarness, request: RunRequest, *, ok: bool = True) -> LsnRange:
    result = harness.execute(request)
    assert result.success is ok, failure_text(result)
    return LsnRange.parse_key(request.partition_key or "")


def _selected_tables(harness: SyncHarness, request: RunRequest) -> set[CapturedTable]:
    if request.asset_selection is None:
        return set(harness.source.tables)
    keys = set(request.asset_selection)
    return {t for t in harness.source.tables if t.change_log_key in keys}


def test_a_table_that_fails_a_range_catches_up_while_the_others_keep_syncing(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sync()
    _changes(harness)
    harness.sync()
    start = harness.assert_mirrors_equal_source()
    failing = harness.source.tables[1]
    others = [t for t in harness.source.tables if t != failing]
    real_output = change_log.range_output
    fired: list[str] = []

    def broken_once(*args: Any, **kwargs: Any) -> Any:
        table = args[1]  # range_output(source, table, ...)
        if table == failing and not fired:
            fired.append(table.qualified_name)
            raise ValueError("value 1e+40 out of range for decimal(18,2)")
        return real_output(*args, **kwargs)

    monkeypatch.setattr(change_log, "range_output", broken_once)

    # 1. the range fails for one table: named in the run's failure, its check says why
    _changes(harness)
    first = harness.tick().run_requests[0]
    r1 = _run(harness, first, ok=False)
    assert fired
    text = failure_text(harness.results[-1])
    assert failing.qualified_name in text and "1 of 5 mirrors left" in text, text
    checks = {
        (e.asset_key, e.check_name): e for e in harness.results[-1].get_asset_check_evaluations()
    }
    broken = checks[(failing.change_log_key, "coverage")]
    assert not broken.passed and "out of range for decimal(18,2)" in (broken.description or "")
    assert mirror_lsn(harness.source, failing) == start
    assert harness.assert_mirrors_equal_source(others) == r1.hi

    # 2. during its pause the others go on: a new range without the failing table
    _changes(harness)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    second = data.run_requests[0]
    assert _selected_tables(harness, second) == set(others)
    r2 = _run(harness, second)
    assert harness.assert_mirrors_equal_source(others) == r2.hi
    assert mirror_lsn(harness.source, failing) == start

    # 3. after the pause it catches up from where it stopped: r1, then r2, that table only
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    for expected in (r1, r2):
        data = harness.tick()
        assert len(data.run_requests) == 1, data.skip_message
        request = data.run_requests[0]
        assert request.partition_key == expected.key
        assert _selected_tables(harness, request) == {failing}
        assert request.tags.get(CATCH_UP_TAG) == "true"
        assert not data.dynamic_partitions_requests
        _run(harness, request)
        assert mirror_lsn(harness.source, failing) == expected.hi

    # 4. one chain again: the next range is every table's, and every mirror equals its source
    _changes(harness)
    data = harness.tick()
    assert _selected_tables(harness, data.run_requests[0]) == set(harness.source.tables)
    r3 = _run(harness, data.run_requests[0])
    assert harness.assert_mirrors_equal_source() == r3.hi


def _in_flight(harness: SyncHarness, request: RunRequest) -> str:
    """A run of ``request`` that is in flight (created, never started): the range lane is busy."""
    job = harness.defs.resolve_job_def(harness.job_name)
    run = harness.instance.create_run_for_job(
        job.get_subset(asset_selection=set(request.asset_selection or [])),
        run_config=QUIET,
        tags={**request.tags, PARTITION_RUN_TAG: request.partition_key or ""},
        status=DagsterRunStatus.NOT_STARTED,
    )
    return run.run_id


def test_a_failed_table_is_caught_up_while_ranges_run_back_to_back(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under steady writes a range run is always in flight and the next one runs ahead of it:
    the failed table is left out of the runs ahead (it would fail again there) and, once its
    pause is over, nothing more runs ahead, so its catch-up comes when the runs in flight end
    (it used to wait for a lull in the workload; the soak saw every range run fail meanwhile)."""
    harness.sync()
    _changes(harness)
    harness.sync()
    failing = harness.source.tables[1]
    others = set(harness.source.tables) - {failing}
    real_output = change_log.range_output
    fired: list[str] = []

    def broken_once(*args: Any, **kwargs: Any) -> Any:
        if args[1] == failing and not fired:
            fired.append(args[1].qualified_name)
            raise ValueError("value 1e+40 out of range for decimal(18,2)")
        return real_output(*args, **kwargs)

    monkeypatch.setattr(change_log, "range_output", broken_once)
    _changes(harness)
    r1 = _run(harness, harness.tick().run_requests[0], ok=False)
    assert fired

    # r2's run is in flight; r3 runs ahead of it, without the table that failed
    _changes(harness)
    (second,) = harness.tick().run_requests
    assert _selected_tables(harness, second) == others
    fake = _in_flight(harness, second)
    _changes(harness)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    third = data.run_requests[0]
    assert _selected_tables(harness, third) == others

    # r3's run in flight now, and the failed table's pause over: nothing more runs ahead, the
    # skip reason says why
    harness.instance.delete_run(fake)
    fake = _in_flight(harness, third)
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    _changes(harness)
    data = harness.tick()
    assert not data.run_requests
    assert failing.qualified_name in (data.skip_message or "") and "catch-up" in (
        data.skip_message or ""
    ), data.skip_message

    # the runs in flight end; the next ticks catch the table up, range by range, then one chain
    harness.instance.delete_run(fake)
    r2, r3 = _run(harness, second), _run(harness, third)
    for expected in (r1, r2, r3):
        data = harness.tick()
        assert len(data.run_requests) == 1, data.skip_message
        request = data.run_requests[0]
        assert request.partition_key == expected.key
        assert _selected_tables(harness, request) == {failing}
        _run(harness, request)
    assert harness.sync() >= 1
    harness.assert_mirrors_equal_source()


def test_a_table_behind_without_a_failure_is_caught_up_before_ranges_run_ahead(
    harness: SyncHarness,
) -> None:
    """A table busy with a snapshot run is left out of the ranges meanwhile; once its snapshot
    run is over, a range run in flight, it has not completed the range before (and did not
    fail): it is not in a run ahead, whose mirror step would refuse it (it never skips a range)
    and fail the run (the soak saw it after a schema change's re-snapshot). Nothing runs ahead,
    saying why, and its catch-up comes first."""
    harness.sync()
    _changes(harness)
    harness.sync()
    behind = harness.source.tables[1]
    snapshot = RunRequest(
        partition_key=SNAPSHOT_PARTITION,
        asset_selection=[behind.change_log_key],
        tags={SOURCE_TAG: SOURCE, SNAPSHOT_OF_TAG: json.dumps([behind.qualified_name])},
    )
    busy = _in_flight(harness, snapshot)
    _changes(harness)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    first = data.run_requests[0]
    assert behind not in _selected_tables(harness, first)  # busy with its snapshot
    r1 = _run(harness, first)
    _changes(harness)
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    second = data.run_requests[0]
    fake = _in_flight(harness, second)
    harness.instance.delete_run(busy)  # its snapshot run is over (nothing new was taken)

    # r2's run in flight: nothing runs ahead of it, and the skip reason names the table
    _changes(harness)
    data = harness.tick()
    assert not data.run_requests, [r.partition_key for r in data.run_requests]
    assert behind.qualified_name in (data.skip_message or "") and "catch-up" in (
        data.skip_message or ""
    ), data.skip_message

    # the run in flight ends: the table's catch-up of r1 comes next, then one chain again
    harness.instance.delete_run(fake)
    _run(harness, second)
    (catch_up,) = harness.tick().run_requests
    assert catch_up.partition_key == r1.key and _selected_tables(harness, catch_up) == {behind}
    _run(harness, catch_up)
    assert harness.sync() >= 1
    harness.assert_mirrors_equal_source()
