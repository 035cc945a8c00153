"""A run launcher whose runs start in a process that was started before them.

Dagster's default launcher asks the code server to start each run: a new Python process (the
*spawn* start method) that imports Dagster, opens the instance and loads the code location
before the run's first step: 5-7 s of every range run under ``make demo`` on 2 cores, most of a
small range's time from commit to mirror (``benchmarks/freshness.py``). This launcher keeps one
spare :mod:`.run_worker` process with all of that done but the definitions (built from the run's
own code origin when it comes, so a reloaded code location is never stale), hands it the next
run's id, and starts the next spare at once. Each run still gets a process of its own, and the
run worker is Dagster's (``core_execute_run`` between the same engine events).

    run_launcher:                       # the instance's dagster.yaml (make demo writes this)
      module: cdc_assets.dagster.warm_launcher
      class: WarmRunLauncher
      config:
        preload: [cdc_assets.dagster.code_location]   # the default

- The first run after the daemon starts waits for its worker to start, as with Dagster's
  launcher; each later one finds its spare ready.
- ``terminate`` (the UI's Terminate, from any process of the instance) marks the run canceling
  and interrupts its worker (SIGINT to the pid in the run's tag ``cdc_assets/run_worker_pid``), as
  Dagster's run worker is interrupted.
- A spare exits when its input closes: when the daemon that started it is gone.
- A run whose worker exits before the run ended (killed, out of memory) is marked failed, with
  the worker's exit code in an engine event (the sync sensor then retries its range).
- The run workers run on the daemon's machine, with its environment and working directory
  (those of ``dagster dev``); for runs in containers, keep Dagster's launchers (``deploy/``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import Field
from dagster._core.launcher import LaunchRunContext, RunLauncher
from dagster._serdes import ConfigurableClass, ConfigurableClassData, serialize_value

PID_TAG = "cdc_assets/run_worker_pid"
# The instance's dagster.yaml section that selects this launcher with its defaults.
DAGSTER_YAML = (
    "run_launcher:\n  module: cdc_assets.dagster.warm_launcher\n  class: WarmRunLauncher\n"
)
DEFAULT_PRELOAD = ("cdc_assets.dagster.code_location",)


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Hands each run to a spare :mod:`.run_worker` process and starts the next (module doc)."""

    def __init__(
        self,
        inst_data: ConfigurableClassData | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
    ) -> None:
        self._inst_data = inst_data
        self._preload = list(preload)
        self._lock = threading.Lock()
        self._spare: subprocess.Popen[bytes] | None = None
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict[str, Any]:
        return {
            "preload": Field(
                [str],
                is_required=False,
                default_value=list(DEFAULT_PRELOAD),
                description="Modules a spare run worker imports before its run comes.",
            )
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> WarmRunLauncher:
        return cls(inst_data=inst_data, **config_value)

    def _start_worker(self) -> subprocess.Popen[bytes]:
        ref = serialize_value(self._instance.get_ref())
        return subprocess.Popen(
            [sys.executable, "-m", "cdc_assets.dagster.run_worker", ref, *self._preload],
            stdin=subprocess.PIPE,
        )

    def _take_spare(self) -> subprocess.Popen[bytes]:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None and spare.poll() is None:
            return spare
        return self._start_worker()

    def _refill(self) -> None:
        worker = self._start_worker()
        with self._lock:
            old, self._spare = self._spare, worker
        if old is not None:
            _close(old)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        worker = self._take_spare()
        try:
            _hand(worker, run.run_id)
        except (BrokenPipeError, OSError):  # the spare died meanwhile: a worker of its own
            worker = self._start_worker()
            _hand(worker, run.run_id)
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(worker.pid)})
        threading.Thread(target=self._refill, name="spare-run-worker", daemon=True).start()
        threading.Thread(
            target=self._reap, args=(worker, run.run_id), name="run-worker-reaper", daemon=True
        ).start()

    def _reap(self, worker: subprocess.Popen[bytes], run_id: str) -> None:
        """Wait for the run's worker; a run it left unfinished (killed, out of memory) failed."""
        code = worker.wait()
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return
        self._instance.report_engine_event(
            f"Run worker (pid: {worker.pid}) exited with code {code} before the run ended.", run
        )
        self._instance.report_run_failed(run)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        pid = run.tags.get(PID_TAG)
        if pid is None:
            return False
        try:
            os.kill(int(pid), signal.SIGINT)
        except (ProcessLookupError, PermissionError, ValueError):
            return False
        return True

    def dispose(self) -> None:
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            _close(spare)


def _hand(worker: subprocess.Popen[bytes], run_id: str) -> None:
    assert worker.stdin is not None
    worker.stdin.write(f"{run_id}\n".encode())
    worker.stdin.close()


def _close(worker: subprocess.Popen[bytes]) -> None:
    """A spare no run was handed: its input closed, it exits."""
    with contextlib.suppress(OSError):
        if worker.stdin is not None:
            worker.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(10)
