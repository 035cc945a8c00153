"""One table never holds back the others (docs/design.md section 8): a table whose range cannot
be written stays where it was while the others commit the range and the next ones; once its
pause is over, the sensor brings it up from where it stopped, one range at a time, its own chain
whole, and the source is one chain again."""

from __future__ import annotations

from typing import Any

import pytest
from dagster import RunRequest

from cdc_assets.dagster import change_log
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.names import CATCH_UP_TAG
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.lsn import LsnRange

from .conftest import SyncHarness, failure_text


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
