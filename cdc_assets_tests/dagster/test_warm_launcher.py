"""The warm run launcher (:mod:`cdc_assets.dagster.warm_launcher`) on a real instance: runs
execute in run workers started before them and kept between runs (one run at a time each, the
definitions built fresh for each), a run can be terminated, a worker whose preloaded code changed
runs the new code, workers are replaced after their number of runs and exit with their daemon."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableJob

from cdc_assets.dagster.warm_launcher import PID_TAG, WarmRunLauncher, Worker

JOBS = """
import json, os, time
from pathlib import Path
from dagster import in_process_executor, job, op

import warm_probe


VERSION = 1


@op(config_schema={"out": str, "sleep": float})
def record(context) -> None:
    Path(context.op_config["out"]).write_text(
        json.dumps({"pid": os.getpid(), "probe": warm_probe.VALUE, "version": VERSION})
    )
    time.sleep(context.op_config["sleep"])


@job(executor_def=in_process_executor)
def probe_job() -> None:
    record()
"""


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str = "") -> Path:
    (tmp_path / "jobs.py").write_text(JOBS)
    (tmp_path / "warm_probe.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the job file's working directory, here and in the workers
    # the workers (started by the launcher, as by the daemon) inherit the environment
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "run_launcher:\n  module: cdc_assets.dagster.warm_launcher\n  class: WarmRunLauncher\n"
        "  config:\n    preload: [warm_probe]\n" + config
    )
    return home


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DagsterInstance]:
    with DagsterInstance.from_config(str(_home(tmp_path, monkeypatch))) as found:
        assert isinstance(found.run_launcher, WarmRunLauncher)
        yield found


def _launch(instance: DagsterInstance, tmp_path: Path, name: str, sleep: float = 0.0) -> str:
    recon = ReconstructableJob.for_file(str(tmp_path / "jobs.py"), "probe_job")
    config = {
        "ops": {"record": {"config": {"out": str(tmp_path / f"{name}.json"), "sleep": sleep}}}
    }
    run = instance.create_run_for_job(
        job_def=recon.get_definition(), run_config=config, job_code_origin=recon.get_python_origin()
    )
    instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]  (not used)
    return run.run_id


def _finished(instance: DagsterInstance, run_id: str, timeout: float = 120) -> DagsterRunStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        if run.is_finished:
            return run.status
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} did not finish in {timeout} s")


def _ran(tmp_path: Path, name: str) -> dict[str, int]:
    return json.loads((tmp_path / f"{name}.json").read_text())


def _running(tmp_path: Path, name: str, timeout: float = 120) -> dict[str, int]:
    """What the op of run ``name`` recorded, once it has (the op then sleeps)."""
    deadline = time.monotonic() + timeout
    while not (tmp_path / f"{name}.json").exists():
        assert time.monotonic() < deadline, f"the op of {name} never started"
        time.sleep(0.2)
    time.sleep(0.2)  # written whole
    return _ran(tmp_path, name)


def _idle(instance: DagsterInstance, count: int, timeout: float = 60) -> list[Worker]:
    """The launcher's idle workers, once there are ``count``."""
    launcher = instance.run_launcher
    assert isinstance(launcher, WarmRunLauncher)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        idle = list(launcher._idle)
        if len(idle) == count:
            return idle
        time.sleep(0.1)
    raise AssertionError(f"the launcher has {len(launcher._idle)} idle workers, not {count}")


def _messages(instance: DagsterInstance, run_id: str) -> list[str]:
    return [e.dagster_event.message for e in instance.all_logs(run_id) if e.dagster_event]


def test_runs_execute_one_after_another_in_the_worker_kept_from_the_last(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    worker = _ran(tmp_path, "first")["pid"]
    spare = next(w for w in _idle(instance, 2) if w.pid != worker)  # started for the next run
    second = _launch(instance, tmp_path, "second", sleep=5)
    assert _running(tmp_path, "second")["pid"] == worker  # the warmest: the last to end a run
    # a run launched while the second runs goes to the spare; a new spare is started
    third = _launch(instance, tmp_path, "third")
    assert _finished(instance, third) == DagsterRunStatus.SUCCESS
    assert _ran(tmp_path, "third")["pid"] == spare.pid
    assert _finished(instance, second) == DagsterRunStatus.SUCCESS
    # at most two wait: once the second's worker reported its end, the new spare was let go
    deadline = time.monotonic() + 60
    while {w.pid for w in _idle(instance, 2)} != {worker, spare.pid}:
        assert time.monotonic() < deadline, "the workers kept are not the last two that ran"
        time.sleep(0.1)
    run = instance.get_run_by_id(second)
    assert run is not None and run.tags[PID_TAG] == str(worker)
    assert f"Started process for run (pid: {worker})." in _messages(instance, second)
    assert f"Process for run exited (pid: {worker})." in _messages(instance, second)


def test_each_run_builds_its_definitions_from_the_code_it_finds(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    jobs = tmp_path / "jobs.py"  # not a preloaded package's: the worker is kept, the job reloaded
    jobs.write_text(jobs.read_text().replace("VERSION = 1", "VERSION = 2"))
    second = _launch(instance, tmp_path, "second")
    assert _finished(instance, second) == DagsterRunStatus.SUCCESS
    assert _ran(tmp_path, "second") == {**_ran(tmp_path, "first"), "version": 2}


def test_a_worker_whose_preloaded_code_changed_runs_the_new_code(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    _idle(instance, 2)
    # the workers preloaded warm_probe (VALUE 1); it changes before the next run comes
    probe = tmp_path / "warm_probe.py"
    probe.write_text("VALUE = 2\n")
    os.utime(probe, (time.time() + 5, time.time() + 5))
    second = _launch(instance, tmp_path, "second")
    assert _finished(instance, second) == DagsterRunStatus.SUCCESS
    # the same process (re-executed in place), the new code
    assert _ran(tmp_path, "second") == {**_ran(tmp_path, "first"), "probe": 2}
    third = _launch(instance, tmp_path, "third")  # and it serves on
    assert _finished(instance, third) == DagsterRunStatus.SUCCESS
    assert _ran(tmp_path, "third") == _ran(tmp_path, "second")


def test_a_run_terminated_from_another_launcher_is_canceled(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    run_id = _launch(instance, tmp_path, "long", sleep=120)
    pid = _running(tmp_path, "long")["pid"]
    # the webserver's launcher (another object, no workers of its own) terminates it
    other = WarmRunLauncher()
    other.register_instance(instance)
    assert other.terminate(run_id)
    assert _finished(instance, run_id, timeout=60) == DagsterRunStatus.CANCELED
    assert other._idle == []
    assert pid not in {w.pid for w in _idle(instance, 1)}  # the interrupted worker exited


def test_workers_are_replaced_after_their_runs_and_exit_with_their_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path, monkeypatch, "    runs_per_worker: 1\n")
    with DagsterInstance.from_config(str(home)) as instance:
        first = _launch(instance, tmp_path, "first")
        assert _finished(instance, first) == DagsterRunStatus.SUCCESS
        (spare,) = _idle(instance, 1)  # the worker of the first run was let go
        assert _ran(tmp_path, "first")["pid"] != spare.pid
        second = _launch(instance, tmp_path, "second")
        assert _finished(instance, second) == DagsterRunStatus.SUCCESS
        assert _ran(tmp_path, "second")["pid"] == spare.pid
        assert spare.process.wait(30) == 0
        (last,) = _idle(instance, 1)
        instance.run_launcher.dispose()
        assert last.process.wait(30) == 0


def test_a_run_whose_worker_is_killed_fails(instance: DagsterInstance, tmp_path: Path) -> None:
    run_id = _launch(instance, tmp_path, "killed", sleep=120)
    pid = _running(tmp_path, "killed")["pid"]
    os.kill(pid, signal.SIGKILL)
    assert _finished(instance, run_id, timeout=60) == DagsterRunStatus.FAILURE
    assert f"Run worker (pid: {pid}) exited with code -9 before the run ended." in _messages(
        instance, run_id
    )
