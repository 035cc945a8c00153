"""``<source>_capture_health``: passes while the capture job runs, fails with the reason and the
fix when it is stopped, and after a restart the sync catches up without a gap."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from typing import Any

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetSelection,
)

from cdc_assets import emulator
from cdc_assets.dagster.health_checks import (
    CAPTURE_HEALTH,
    LAG_WARN_SECONDS,
    STALL_SECONDS,
    START_CAPTURE,
    assess,
)
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, partitions_name
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.sqlserver import CaptureHealth, cdc_admin, get_max_lsn

from .conftest import SOURCE, SyncHarness, failure_text


def _run_capture_checks(harness: SyncHarness) -> dict[AssetKey, AssetCheckEvaluation]:
    """Execute only the capture_health checks (what the UI's "Execute checks" does)."""
    started = time.monotonic()
    result = harness.run_checks(
        AssetSelection.checks(
            *[AssetCheckKey(t.change_log_key, CAPTURE_HEALTH) for t in harness.source.tables]
        )
    )
    print(f"capture_health checks: {time.monotonic() - started:.1f} s")
    assert result.success, failure_text(result)
    evaluations = {e.asset_key: e for e in result.get_asset_check_evaluations()}
    assert all(e.check_name == CAPTURE_HEALTH for e in evaluations.values())
    assert set(evaluations) == {t.change_log_key for t in harness.source.tables}
    return evaluations


def _exec(harness: SyncHarness, sql: str) -> None:
    conn = harness.source.connect()
    try:
        conn.cursor().execute(sql)
    finally:
        conn.close()


def _meta(evaluation: AssetCheckEvaluation, name: str) -> Any:
    return evaluation.metadata[name].value


def test_passes_for_every_table_while_the_capture_job_runs(harness: SyncHarness) -> None:
    with emulator.CaptureAgent(harness.db) as agent:
        harness.workload.step()
        evaluations = _run_capture_checks(harness)
    assert not agent.errors
    for table in harness.source.tables:
        evaluation = evaluations[table.change_log_key]
        assert evaluation.passed, evaluation.description
        assert "Capture is running" in (evaluation.description or "")
        assert _meta(evaluation, "job_running") is True
        assert _meta(evaluation, "capture_instance") == table.instance.name
        assert table.instance.start_lsn is not None
        assert _meta(evaluation, "min_lsn") == table.instance.start_lsn.hex
        for name in ("last_scan_end", "capture_latency_s", "max_lsn"):
            assert _meta(evaluation, name) != "unknown", name


def test_stopped_capture_fails_and_a_restart_catches_up_without_a_gap(
    harness: SyncHarness,
) -> None:
    harness.sync()  # the snapshot: the chain starts where its replay starts
    conn = harness.source.connect()
    try:
        max_before = get_max_lsn(conn)
    finally:
        conn.close()
    chain_start = min(
        harness.source.store.properties(t.change_log_key.path, SNAPSHOT_PARTITION)["replay_from"]
        for t in harness.source.tables
    )
    snapshots = {
        t: harness.source.store.current_version(t.change_log_key.path, SNAPSHOT_PARTITION)
        for t in harness.source.tables
    }

    # (2) The job is stopped; the source keeps committing. A running agent obeys the stop.
    conn = harness.source.connect()
    try:
        cdc_admin.stop_job(conn, "capture")
    finally:
        conn.close()
    with emulator.CaptureAgent(harness.db, check_interval=0.05) as agent:
        for _ in range(10):
            harness.workload.step()
        time.sleep(0.3)  # the agent would have scanned by now if the job ran
        assert agent.scans == 0
        assert not harness.tick().run_requests, "nothing captured, so nothing to sync"
        evaluations = _run_capture_checks(harness)
    for table in harness.source.tables:
        evaluation = evaluations[table.change_log_key]
        assert not evaluation.passed
        assert evaluation.severity == AssetCheckSeverity.ERROR
        description = evaluation.description or ""
        assert "capture job is stopped" in description, description
        assert START_CAPTURE in description and "without a gap" in description
        assert _meta(evaluation, "job_running") is False
        assert _meta(evaluation, "max_lsn") == max_before.hex

    # (3) Started again: capture catches up, the sync continues the chain where it ended.
    _exec(harness, START_CAPTURE)
    with emulator.CaptureAgent(harness.db, check_interval=0.05) as agent:
        deadline = time.monotonic() + 30
        while agent.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.scans > 0 and agent.captured > 0 and not agent.errors
    assert emulator.scan(harness.db) == 0, "the restarted capture job left transactions behind"

    assert harness.sync() >= 1
    lsn = harness.assert_mirrors_equal_source()
    chain = range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))
    assert chain and chain[0].lo.hex == chain_start, f"a gap after the snapshot: {chain}"
    assert all(a.hi == b.lo for a, b in itertools.pairwise(chain)), f"a gap: {chain}"
    conn = harness.source.connect()
    try:
        assert chain[-1].hi == lsn == get_max_lsn(conn)
    finally:
        conn.close()
    for table, version in snapshots.items():  # caught up from the log, not re-snapshotted
        assert (
            harness.source.store.current_version(table.change_log_key.path, SNAPSHOT_PARTITION)
            == version
        )
    # Every sync run evaluates capture_health too (a healthy sync shows green): the last one,
    # after the restart, passed for every table.
    last_run = harness.results[-1]
    assert LsnRange.parse_key(last_run.dagster_run.tags["dagster/partition"]) == chain[-1]
    in_run = [e for e in last_run.get_asset_check_evaluations() if e.check_name == CAPTURE_HEALTH]
    assert in_run and all(e.passed for e in in_run)

    evaluations = _run_capture_checks(harness)
    for table in harness.source.tables:
        evaluation = evaluations[table.change_log_key]
        assert evaluation.passed, evaluation.description
        assert _meta(evaluation, "job_running") is True


# -- the verdict on synthetic states (no database) ---------------------------------------------

NOW = dt.datetime(2024, 5, 1, 12, 0, 0)


def _health(**changes: Any) -> CaptureHealth:
    values: dict[str, Any] = {
        "job_configured": True,
        "polling_interval_s": 5,
        "maxtrans": 500,
        "retention_minutes": 4320,
        "last_scan_end": NOW - dt.timedelta(seconds=3),
        "latency_s": 1,
        "max_lsn": Lsn.parse("0x0000002a000000100003"),
        "max_lsn_time": NOW - dt.timedelta(seconds=4),
        "min_lsn_per_instance": {},
        "job_running": True,
        "continuous": True,
        "last_scan_errors": 0,
        "server_time": NOW,
    }
    values.update(changes)
    return CaptureHealth(**values)


def test_assess_healthy_and_not_visible_parts() -> None:
    assert assess(_health()).severity is None
    # msdb not visible: the job state is unknown, the fresh scan says capture is alive
    hidden = assess(_health(job_running=None, unavailable=("msdb.dbo.sysjobactivity",)))
    assert hidden.severity is None
    assert hidden.metadata["job_running"] == "unknown"
    assert hidden.metadata["not_visible"] == "msdb.dbo.sysjobactivity"
    # a scheduled (non-continuous) job is stopped between its runs: not a failure by itself
    assert assess(_health(job_running=False, continuous=False)).severity is None


def test_assess_stalled_job_reported_running() -> None:
    stale = NOW - dt.timedelta(seconds=STALL_SECONDS + 60)
    verdict = assess(_health(last_scan_end=stale, max_lsn_time=stale))
    assert verdict.severity == AssetCheckSeverity.ERROR
    (reason,) = verdict.errors
    assert "has not scanned the log for 360 s" in reason
    assert "sp_cdc_start_job" in reason and "without a gap" in reason
    # slow polling raises the limit
    assert assess(_health(last_scan_end=stale, polling_interval_s=60)).severity is None


def test_assess_lag_and_invisible_scans_warn() -> None:
    lagging = assess(_health(latency_s=int(LAG_WARN_SECONDS) + 30))
    assert lagging.severity == AssetCheckSeverity.WARN
    assert "latency is 90 s" in lagging.warnings[0]
    old = NOW - dt.timedelta(seconds=STALL_SECONDS + 1)
    unseen = assess(
        _health(
            last_scan_end=None,
            latency_s=None,
            max_lsn_time=old,
            unavailable=("sys.dm_cdc_log_scan_sessions",),
        )
    )
    assert unseen.severity == AssetCheckSeverity.WARN
    assert "not visible" in unseen.warnings[0]


def test_assess_errors_without_job_or_with_scan_errors() -> None:
    assert assess(_health(job_configured=False, job_running=None)).severity == (
        AssetCheckSeverity.ERROR
    )
    assert "sp_cdc_add_job" in assess(_health(job_configured=False)).errors[0]
    assert assess(_health(last_scan_errors=2)).severity == AssetCheckSeverity.ERROR
    empty = assess(_health(max_lsn=None, max_lsn_time=None))
    assert empty.severity == AssetCheckSeverity.ERROR
    assert any("sys.fn_cdc_get_max_lsn() is NULL" in e for e in empty.errors), empty.errors
