"""``at_chain_end`` says a healthy sync is healthy and a stuck one is stuck (issue 56).

Since the sensor asks for the next range while the previous range run is in flight, the chain
nearly always ends a range past the mirrors: the check passes then, saying what is in flight and
how far behind the mirror is; it fails only when the sync is stuck — a range run that cannot
start, a failed run not retried — saying which and what to do, within a bounded time.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckSeverity,
    DagsterRunStatus,
    ExecuteInProcessResult,
    RunRequest,
)

from cdc_assets.dagster import mirror
from cdc_assets.dagster.sync import chain_end_check, retry_waits
from cdc_assets.dagster.sync.chain_end_check import AT_CHAIN_END, Patience
from cdc_assets.dagster.sync.names import PARTITION_RUN_TAG, health_job_name
from cdc_assets.emulator import faults
from cdc_assets.lsn import LsnRange
from cdc_assets_tests.support.steady_writes import steady_writes

from .conftest import QUIET, SOURCE, SyncHarness, assert_succeeded

RANGES = 4  # range runs asked for back to back


def _park_mirrors_steps(monkeypatch: pytest.MonkeyPatch) -> queue.Queue[threading.Event]:
    """Each range run's mirrors step, once its mirrors are committed and just before it judges
    their at_chain_end, parks: it puts an event in the queue returned and waits until the test
    sets it. The test asks the sensor for the next range meanwhile, so every run is judged with
    the next range in flight, as under ``make demo``. (Runs are in-process threads here: a run
    started while another logs can deadlock in Python's logging, which Dagster reconfigures at
    each run's start; so a run starts only while the others are parked.)"""
    parked: queue.Queue[threading.Event] = queue.Queue()
    real = mirror.record_failures

    def park(*args: Any, **kwargs: Any) -> Any:
        rows = real(*args, **kwargs)
        release = threading.Event()
        parked.put(release)
        assert release.wait(600), "the test never released a mirrors step"
        return rows

    monkeypatch.setattr(mirror, "record_failures", park)
    return parked


def _next_request(harness: SyncHarness) -> RunRequest:
    """Tick until the sensor asks for a run (the workload writes meanwhile): its request."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        harness.capture()
        requests = harness.tick().run_requests
        if requests:
            (request,) = requests
            return request
        time.sleep(0.2)
    raise AssertionError("the sensor asked for no range in 120 s of writes")


def _waiting_for_earlier(harness: SyncHarness, key: str) -> bool:
    """The run of range ``key`` has started and waits for the range runs before it."""
    for run in harness.instance.get_runs():
        if run.tags.get(PARTITION_RUN_TAG) == key and run.status == DagsterRunStatus.STARTED:
            return any(
                "waiting for the earlier range run" in (e.message or "")
                for e in harness.instance.all_logs(run.run_id)
            )
    return False


def _metadata(evaluation: AssetCheckEvaluation) -> dict[str, Any]:
    return {k: getattr(v, "value", v) for k, v in evaluation.metadata.items()}


def test_at_chain_end_passes_while_ranges_run_back_to_back_under_a_sustained_workload(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sync()  # the snapshot
    harness.next_range()  # the mirrors are built
    parked = _park_mirrors_steps(monkeypatch)
    requests: list[RunRequest] = []
    results: list[ExecuteInProcessResult] = []
    threads: list[threading.Thread] = []

    def start(request: RunRequest) -> None:
        requests.append(request)
        thread = threading.Thread(target=lambda: results.append(harness.execute(request)))
        thread.start()
        threads.append(thread)

    with steady_writes(harness.db, 0.05, seed=56, tables=harness.workload.tables):
        try:
            start(_next_request(harness))
            for i in range(RANGES):
                release = parked.get(timeout=600)  # run i has committed its mirrors
                if i < RANGES - 1:
                    start(_next_request(harness))  # asked for while run i is in flight
                    key = requests[-1].partition_key or ""
                    deadline = time.monotonic() + 300
                    while not _waiting_for_earlier(harness, key):
                        assert time.monotonic() < deadline, f"the run of {key} did not start"
                        time.sleep(0.2)
                release.set()
        finally:
            while not parked.empty():  # a failed test leaves no run waiting
                parked.get().set()
            for thread in threads:
                thread.join(600)
    assert len(requests) == RANGES == len(results), [r.partition_key for r in requests]
    for result in results:
        assert_succeeded(result)
    by_partition = {r.dagster_run.tags[PARTITION_RUN_TAG]: r for r in _records(harness)}
    keys = [r.partition_key or "" for r in requests]
    for earlier, later in itertools.pairwise(keys):
        # asked for while the run before it was still in flight
        ended = by_partition[earlier].end_time
        assert ended is not None and by_partition[later].create_timestamp.timestamp() < ended

    # every at_chain_end the runs reported passed; each run but the last judged its mirrors
    # with the next range in flight, and says so
    for request, result in zip(requests, (_of(results, k) for k in keys), strict=True):
        evaluations = [
            e for e in result.get_asset_check_evaluations() if e.check_name == AT_CHAIN_END
        ]
        mirrors = {k for k in request.asset_selection or [] if k.path[0] == "mirror"}
        assert mirrors and mirrors <= {e.asset_key for e in evaluations}, evaluations
        assert all(e.passed for e in evaluations), [
            e.description for e in evaluations if not e.passed
        ]
        following = keys.index(request.partition_key or "") + 1
        for evaluation in (e for e in evaluations if e.asset_key in mirrors):
            shown = _metadata(evaluation)
            assert shown["at_lsn"] == LsnRange.parse_key(request.partition_key or "").hi.hex
            if following == len(keys):
                assert shown["ranges_behind"] == 0 and shown["chain_end"] == shown["at_lsn"]
                continue
            assert shown["ranges_behind"] == 1 and shown["ranges_in_flight"] == 1, shown
            assert keys[following] in shown["runs_in_flight"], shown
            assert shown["chain_end"] == LsnRange.parse_key(keys[following]).hi.hex, shown
            assert 0 <= shown["behind_seconds"] < 600, shown
            assert "in flight" in (evaluation.description or ""), evaluation.description


def _records(harness: SyncHarness) -> list[Any]:
    return [
        r
        for r in harness.instance.get_run_records()
        if r.dagster_run.tags.get(PARTITION_RUN_TAG, "snapshot") != "snapshot"
    ]


def _of(results: list[ExecuteInProcessResult], key: str) -> ExecuteInProcessResult:
    return next(r for r in results if r.dagster_run.tags.get(PARTITION_RUN_TAG) == key)


def _judge(harness: SyncHarness) -> Callable[[], list[AssetCheckEvaluation]]:
    """What the health job (every 5 minutes) says of every mirror's at_chain_end, evaluated."""
    keys = {AssetCheckKey(t.mirror_key, AT_CHAIN_END) for t in harness.source.tables}
    job = harness.defs.resolve_job_def(health_job_name(SOURCE)).get_subset(
        asset_check_selection=keys
    )

    def evaluate() -> list[AssetCheckEvaluation]:
        result = job.execute_in_process(
            instance=harness.instance, run_config=QUIET, raise_on_error=False
        )
        assert_succeeded(result)
        evaluations = result.get_asset_check_evaluations()
        assert {e.asset_check_key for e in evaluations} == keys
        return evaluations

    return evaluate


def test_a_stalled_sync_fails_at_chain_end_within_a_bounded_time_saying_why(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sync()
    harness.next_range()
    limits = Patience(ask=2.0, start=3.0, queue=3.0)
    monkeypatch.setattr(chain_end_check, "patience", lambda _source: limits)
    judge = _judge(harness)
    assert all(e.passed for e in judge())

    # 1. A range whose run cannot start: the sensor asks for it, the run is created and never
    # started (no launcher takes it). At first it is in flight; past the time a run takes to
    # start, it is stuck.
    for _ in range(4):
        harness.workload.step()
    harness.capture()
    (request,) = harness.tick().run_requests
    job = harness.defs.resolve_job_def(harness.job_name)
    queued = harness.instance.create_run_for_job(
        job.get_subset(asset_selection=set(request.asset_selection or [])),
        run_config=QUIET,
        tags={**request.tags, PARTITION_RUN_TAG: request.partition_key or ""},
        status=DagsterRunStatus.NOT_STARTED,
    )
    for evaluation in judge():
        shown = _metadata(evaluation)
        assert evaluation.passed, evaluation.description
        assert shown["ranges_behind"] == 1 and shown["ranges_in_flight"] == 1, shown
        assert (
            f"{queued.run_id[:8]} ({request.partition_key}, NOT_STARTED)" in shown["runs_in_flight"]
        )
    assert not harness.tick().run_requests  # the run in flight holds the lane
    record = harness.instance.get_run_record_by_id(queued.run_id)
    assert record is not None
    created = record.create_timestamp.timestamp()
    time.sleep(max(0.0, created + limits.start + 0.5 - time.time()))
    for evaluation in judge():  # the first evaluation past the bound fails
        text = evaluation.description or ""
        assert not evaluation.passed and evaluation.severity == AssetCheckSeverity.WARN, text
        assert f"run {queued.run_id} ({request.partition_key}) was launched" in text, text
        assert "has not started (NOT_STARTED" in text and "run launcher" in text, text

    # 2. The person cancels it (what the check said to do): a run canceled and not retried yet
    harness.instance.report_run_canceled(queued)
    for evaluation in judge():
        text = evaluation.description or ""
        assert not evaluation.passed, text
        assert f"run {queued.run_id} of range {request.partition_key} was canceled" in text

    # 3. The sensor asks again at once; the source is unreachable and the run fails as a whole
    (again,) = harness.tick().run_requests
    assert again.partition_key == request.partition_key
    faults.inject(harness.db, faults.Fault("unreachable", times=1000))
    try:
        failed = harness.execute(again)
    finally:
        faults.clear(harness.db)
    assert not failed.success
    for evaluation in judge():
        text = evaluation.description or ""
        assert not evaluation.passed, text
        assert f"run {failed.run_id} of range {again.partition_key} failed" in text, text
        assert f"source {SOURCE}: TCP Provider" in text and "runs the range again" in text, text

    # 4. The source is back: the sensor's retry moves every mirror to the chain's end
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    (retry,) = harness.tick().run_requests
    assert retry.partition_key == request.partition_key
    result = harness.execute(retry)
    assert_succeeded(result)
    ran = [e for e in result.get_asset_check_evaluations() if e.check_name == AT_CHAIN_END]
    assert ran and all(e.passed for e in ran), [e.description for e in ran]
    assert all(e.passed and _metadata(e)["ranges_behind"] == 0 for e in judge())
