"""A source's tables in groups, one change-log and one mirror step per group (Dagster's cost per
step grows with the cube of its tables): a range runs the steps of the groups it touches, the
run's first change-log step records every other table quiet, once, and every mirror ends equal
to its table. Groups of 2 here, as groups of 100 are in a thousand-table source."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterEventType, DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.sync import table_steps
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.lsn import LsnRange
from cdc_assets.workload import small_tables

from .conftest import SOURCE, SyncHarness, assert_small_mirrors_equal, failure_text, make_harness


def _step_keys(harness: SyncHarness, run_id: str) -> set[str]:
    records = harness.instance.get_records_for_run(
        run_id, of_type=DagsterEventType.STEP_START
    ).records
    return {r.event_log_entry.step_key or "" for r in records}


def _quiet_reports(harness: SyncHarness, run_id: str) -> dict[str, list[str]]:
    """The quiet materializations of the run, by the step that logged them."""
    records = harness.instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
    ).records
    found: dict[str, list[str]] = {}
    for record in records:
        event = record.event_log_entry.dagster_event
        assert event is not None
        materialization = event.event_specific_data.materialization  # type: ignore[union-attr]
        if materialization.metadata.get("quiet"):
            step = record.event_log_entry.step_key or ""
            found.setdefault(step, []).append(materialization.asset_key.to_user_string())
    return found


def _change(harness: SyncHarness, touched: list[int], qty: int) -> None:
    conn = emulator.connect(str(harness.db), autocommit=False)
    try:  # one transaction across the touched tables
        for i in touched:
            name = harness.source.tables[i].name
            conn.execute(f"UPDATE [dbo].[{name}] SET [qty] = {qty} WHERE [id] = 1")
        conn.commit()
    finally:
        conn.close()
    harness.capture()


def test_a_range_runs_the_steps_of_the_groups_it_touches(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(table_steps, "TABLES_PER_STEP", 2)
    harness = make_harness(tmp_path, spark, instance, tables=small_tables(5), rows=2)
    tables = harness.source.tables
    job = harness.defs.resolve_job_def(harness.job_name)
    ops = {node.name for node in job.nodes}
    groups = [f"{SOURCE}_{kind}_{i:03d}" for kind in ("change_logs", "mirrors") for i in (1, 2, 3)]
    assert set(groups) <= ops, ops

    harness.capture()
    harness.sync()  # the snapshot of every table: one step per group
    assert _step_keys(harness, harness.results[0].run_id) >= {
        f"{SOURCE}_change_logs_{i:03d}" for i in (1, 2, 3)
    }
    _change(harness, [0], qty=5)
    harness.sync()  # the range that builds every mirror
    state = SourceSync.load(harness.source, fill=False)
    assert all(state[t].mirror_built for t in tables)

    # tables 1 and 4: groups 1 and 3; the first group's step records tables 0, 2 and 3 quiet
    for touched, recorder in (([1, 4], 1), ([4], 3)):
        _change(harness, touched, qty=10 + len(touched))
        data = harness.tick()
        assert len(data.run_requests) == 1, data.skip_message
        request = data.run_requests[0]
        result = harness.execute(request)
        assert result.success, failure_text(result)
        groups_run = sorted({i // 2 + 1 for i in touched})
        steps = _step_keys(harness, result.run_id)
        assert {s for s in steps if "change_logs" in s or "mirrors" in s} == {
            f"{SOURCE}_{kind}_{g:03d}" for kind in ("change_logs", "mirrors") for g in groups_run
        }, steps
        quiet = [t for i, t in enumerate(tables) if i not in touched]
        reports = _quiet_reports(harness, result.run_id)
        assert list(reports) == [f"{SOURCE}_change_logs_{recorder:03d}"], reports
        (reported,) = reports.values()
        assert sorted(reported) == sorted(
            k.to_user_string() for t in quiet for k in (t.change_log_key, t.mirror_key)
        )
        hi = LsnRange.parse_key(request.partition_key or "").hi
        state = SourceSync.load(harness.source, fill=False)
        assert {state[t].mirror_at for t in tables} == {hi}
        assert not harness.tick().run_requests
    assert_small_mirrors_equal(harness)
