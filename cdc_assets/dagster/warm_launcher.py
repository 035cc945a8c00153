"""A run launcher whose runs execute in run worker processes started before them and kept.

Dagster's default launcher asks the code server to start each run: a new Python process (the
*spawn* start method) that imports Dagster, opens the instance, loads the code location and
connects to Spark before the run's first step: 5-7 s of every range run under ``make demo`` on 2
cores, most of a small range's time from commit to mirror (``benchmarks/freshness.py``). This
launcher hands each run to a :mod:`.run_worker` process that has done all of that but build the
definitions (built from the run's own code origin when it comes, so a reloaded code location is
never stale): an idle worker that ran an earlier run, else the spare started for it. A worker runs
one run at a time, reports its end, and waits for the next; the run itself is Dagster's
(``core_execute_run`` between the same engine events).

    run_launcher:                       # the instance's dagster.yaml (make demo writes this)
      module: cdc_assets.dagster.warm_launcher
      class: WarmRunLauncher
      config:
        preload: [cdc_assets.dagster.code_location]   # the default
        idle_workers: 2                                # the default
        runs_per_worker: 200                           # the default

- A run goes to the worker that ended a run last (its Spark session and JIT the warmest), else
  to a spare; when it took the last idle one, the next spare starts at once. At most
  ``idle_workers`` wait between runs (two: a range run may start while the one before it is in its
  last step), the least recently used let go first; a worker past ``runs_per_worker`` runs is let
  go (its memory back) and replaced.
- The first run after the daemon starts waits for its worker to start, as with Dagster's
  launcher.
- ``terminate`` (the UI's Terminate, from any process of the instance) marks the run canceling
  and interrupts its worker (SIGINT to the pid in the run's tag ``cdc_assets/run_worker_pid``), as
  Dagster's run worker is interrupted; that worker then exits.
- A worker exits when its input closes: when the launcher lets it go, or the daemon is gone.
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

from cdc_assets.dagster import run_worker

PID_TAG = "cdc_assets/run_worker_pid"
# The instance's dagster.yaml section that selects this launcher with its defaults.
DAGSTER_YAML = (
    "run_launcher:\n  module: cdc_assets.dagster.warm_launcher\n  class: WarmRunLauncher\n"
)
DEFAULT_PRELOAD = ("cdc_assets.dagster.code_location",)
DEFAULT_IDLE_WORKERS = 2
DEFAULT_RUNS_PER_WORKER = 200


class Worker:
    """One :mod:`.run_worker` process: its input (run ids), its report pipe, the run it has."""

    def __init__(self, ref: str, preload: Sequence[str]) -> None:
        read, write = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", run_worker.__name__, ref, str(write), *preload],
                stdin=subprocess.PIPE,
                pass_fds=(write,),
            )
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)  # the worker holds the only write end: its exit ends the report
        self.reports = os.fdopen(read, "rb")
        self.run_id: str | None = None  # handed and not reported done
        self.runs = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def hand(self, run_id: str) -> None:
        assert self.process.stdin is not None
        self.run_id = run_id  # before it can report the run done
        try:
            self.process.stdin.write(f"{run_id}\n".encode())
            self.process.stdin.flush()
        except BaseException:
            self.run_id = None
            raise
        self.runs += 1

    def close(self) -> None:
        """Close its input: it exits after the run it has, if any."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Hands each run to a kept :mod:`.run_worker` process (module doc)."""

    def __init__(
        self,
        inst_data: ConfigurableClassData | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        idle_workers: int = DEFAULT_IDLE_WORKERS,
        runs_per_worker: int = DEFAULT_RUNS_PER_WORKER,
    ) -> None:
        self._inst_data = inst_data
        self._preload = list(preload)
        self._max_idle = max(1, idle_workers)
        self._runs_per_worker = max(1, runs_per_worker)
        self._lock = threading.Lock()
        self._idle: list[Worker] = []  # the last to end a run at the end
        self._closed = False
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
                description="Modules a run worker imports before its first run comes.",
            ),
            "idle_workers": Field(
                int,
                is_required=False,
                default_value=DEFAULT_IDLE_WORKERS,
                description="At most this many run workers wait for a run (at least one).",
            ),
            "runs_per_worker": Field(
                int,
                is_required=False,
                default_value=DEFAULT_RUNS_PER_WORKER,
                description="A run worker is replaced after this many runs.",
            ),
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> WarmRunLauncher:
        return cls(inst_data=inst_data, **config_value)

    def _start_worker(self) -> Worker:
        worker = Worker(serialize_value(self._instance.get_ref()), self._preload)
        threading.Thread(
            target=self._follow, args=(worker,), name="run-worker-reports", daemon=True
        ).start()
        return worker

    def _take_worker(self) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.poll() is None:
                    return worker
        return self._start_worker()

    def _keep_a_spare(self) -> None:
        with self._lock:
            if self._idle or self._closed:
                return
        spare = self._start_worker()
        with self._lock:
            keep = not self._closed and len(self._idle) < self._max_idle
            if keep:
                self._idle.insert(0, spare)
        if not keep:  # another launch started one meanwhile, or the launcher closed
            spare.close()

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        worker = self._take_worker()
        try:
            worker.hand(run.run_id)
        except (BrokenPipeError, OSError):  # it died meanwhile: a worker of its own
            worker = self._start_worker()
            worker.hand(run.run_id)
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(worker.pid)})
        threading.Thread(target=self._keep_a_spare, name="spare-run-worker", daemon=True).start()

    def _follow(self, worker: Worker) -> None:
        """Read the worker's reports: after each run it is idle again (or let go); when it
        exits, a run it left unfinished (killed, out of memory) failed."""
        for line in worker.reports:
            word, _, run_id = line.decode().strip().partition(" ")
            if word != run_worker.DONE or run_id != worker.run_id:
                continue
            worker.run_id = None
            let_go = [worker]
            with self._lock:
                if not self._closed and worker.runs < self._runs_per_worker:
                    self._idle.append(worker)  # the first to take the next run
                    let_go = self._idle[: -self._max_idle]  # the least recently used
                    del self._idle[: -self._max_idle]
            for gone in let_go:
                gone.close()
        worker.reports.close()
        code = worker.process.wait()
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
        if worker.run_id is not None:
            self._fail_unfinished(worker.run_id, worker.pid, code)

    def _fail_unfinished(self, run_id: str, pid: int, code: int) -> None:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return
        self._instance.report_engine_event(
            f"Run worker (pid: {pid}) exited with code {code} before the run ended.", run
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
        """Let the idle workers go (they exit); a worker with a run exits after it, when the
        daemon's process ends and with it their input."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()
        for worker in idle:
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(10)
