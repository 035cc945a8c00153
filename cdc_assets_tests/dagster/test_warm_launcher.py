"""The warm run launcher (:mod:`cdc_assets.dagster.warm_launcher`) on a real instance: runs
execute in the spare worker started before them (each in a process of its own), a run can be
terminated, a spare whose preloaded code changed runs the new code, a spare exits with its
daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableJob

from cdc_assets.dagster.warm_launcher import PID_TAG, WarmRunLauncher

JOBS = """
import json, os, time
from pathlib import Path
from dagster import in_process_executor, job, op

import warm_probe


@op(config_schema={"out": str, "sleep": float})
def record(context) -> None:
    Path(context.op_config["out"]).write_text(
        json.dumps({"pid": os.getpid(), "probe": warm_probe.VALUE})
    )
    time.sleep(context.op_config["sleep"])


@job(executor_def=in_process_executor)
def probe_job() -> None:
    record()
"""


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DagsterInstance]:
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
        "  config:\n    preload: [warm_probe]\n"
    )
    with DagsterInstance.from_config(str(home)) as found:
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


def _spare(instance: DagsterInstance, timeout: float = 60) -> subprocess.Popen[bytes]:
    launcher = instance.run_launcher
    assert isinstance(launcher, WarmRunLauncher)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spare = launcher._spare
        if spare is not None:
            return spare
        time.sleep(0.1)
    raise AssertionError("no spare run worker was started")


def test_each_run_executes_in_the_spare_started_before_it(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    spare = _spare(instance)  # started after the first run was handed its worker
    assert spare.poll() is None
    second = _launch(instance, tmp_path, "second")
    assert _finished(instance, second) == DagsterRunStatus.SUCCESS
    ran = json.loads((tmp_path / "second.json").read_text())
    assert ran["pid"] == spare.pid  # the run's op ran in the spare
    run = instance.get_run_by_id(second)
    assert run is not None and run.tags[PID_TAG] == str(spare.pid)
    assert json.loads((tmp_path / "first.json").read_text())["pid"] != spare.pid
    events = [e.dagster_event.message for e in instance.all_logs(second) if e.dagster_event]
    assert f"Started process for run (pid: {spare.pid})." in events
    assert f"Process for run exited (pid: {spare.pid})." in events


def test_a_run_terminated_from_another_launcher_is_canceled(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    run_id = _launch(instance, tmp_path, "long", sleep=120)
    deadline = time.monotonic() + 120
    while not (tmp_path / "long.json").exists():  # its op is running
        assert time.monotonic() < deadline, "the op never started"
        time.sleep(0.2)
    # the webserver's launcher (another object, no spare of its own) terminates it
    other = WarmRunLauncher()
    other.register_instance(instance)
    assert other.terminate(run_id)
    assert _finished(instance, run_id, timeout=60) == DagsterRunStatus.CANCELED
    assert other._spare is None


def test_a_spare_whose_code_changed_runs_the_new_code(
    instance: DagsterInstance, tmp_path: Path
) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    _spare(instance)
    # the spare preloaded warm_probe (VALUE 1); it changes before the next run comes
    probe = tmp_path / "warm_probe.py"
    probe.write_text("VALUE = 2\n")
    os.utime(probe, (time.time() + 5, time.time() + 5))
    second = _launch(instance, tmp_path, "second")
    assert _finished(instance, second) == DagsterRunStatus.SUCCESS
    assert json.loads((tmp_path / "second.json").read_text())["probe"] == 2


def test_a_spare_exits_when_its_launcher_goes(instance: DagsterInstance, tmp_path: Path) -> None:
    first = _launch(instance, tmp_path, "first")
    assert _finished(instance, first) == DagsterRunStatus.SUCCESS
    spare = _spare(instance)
    instance.run_launcher.dispose()
    assert spare.wait(30) == 0


def test_a_run_whose_worker_is_killed_fails(instance: DagsterInstance, tmp_path: Path) -> None:
    run_id = _launch(instance, tmp_path, "killed", sleep=120)
    deadline = time.monotonic() + 120
    while not (tmp_path / "killed.json").exists():  # its op is running
        assert time.monotonic() < deadline, "the op never started"
        time.sleep(0.2)
    pid = json.loads((tmp_path / "killed.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    assert _finished(instance, run_id, timeout=60) == DagsterRunStatus.FAILURE
    events = [e.dagster_event.message for e in instance.all_logs(run_id) if e.dagster_event]
    assert f"Run worker (pid: {pid}) exited with code -9 before the run ended." in events
