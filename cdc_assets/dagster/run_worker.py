"""The process a run of :class:`.warm_launcher.WarmRunLauncher` executes in: started before its
run comes, with Dagster, the project's modules and the instance already loaded, it waits on its
standard input for a run id, then executes that run as Dagster's own run worker does (the code
server's subprocess: ``core_execute_run``, the engine events around it) and exits.

Started by the launcher, never by hand:

    python -m cdc_assets.dagster.run_worker <serialized instance ref> <module to preload>...

- End of input before a run id (the daemon that started it is gone): it exits.
- The code is loaded from the run's own origin after the run comes (``recon_job_from_origin``):
  the definitions are built fresh for each run, never kept from a code location reloaded since.
  Only modules are preloaded; if a source file of the project or of a preloaded module's package
  changed while the worker waited, it replaces itself with a fresh process (``os.execv``) before
  it runs anything.
- It warms up beside the run just handed the previous worker, at the same priority: at a lower
  one (``nice`` 10) the spare was still warming up when the next run came on 2 busy cores
  (launch 6.1 s p50 against 0.4 s).
- SIGINT (the launcher's ``terminate``, or Ctrl-C to the process group) interrupts the run as
  Dagster's run worker is interrupted.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dagster import DagsterInstance

FRESH = "--fresh"  # argv flag: a worker re-executed to run this run id without preloading


def _source_times(packages: set[str]) -> dict[str, float]:
    """The modification time of each loaded module's file in ``packages`` (top-level names)."""
    times = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and name.split(".")[0] in packages:
            try:
                times[file] = os.stat(file).st_mtime
            except OSError:
                continue
    return times


def _changed(times: dict[str, float]) -> bool:
    for file, mtime in times.items():
        try:
            if os.stat(file).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


def load_instance(instance_ref: str) -> DagsterInstance:
    from dagster import DagsterInstance
    from dagster._serdes import deserialize_value

    return DagsterInstance.from_ref(deserialize_value(instance_ref))


def execute(run_id: str, instance: DagsterInstance) -> None:
    """Execute run ``run_id`` of ``instance`` as Dagster's run worker does."""
    from dagster._core.events import EngineEventData
    from dagster._grpc.impl import core_execute_run
    from dagster._utils.hosted_user_process import recon_job_from_origin

    with instance:
        run = instance.get_run_by_id(run_id)
        if run is None or run.job_code_origin is None:
            raise SystemExit(f"run worker: run {run_id} not found, or it has no code origin")
        pid = os.getpid()
        instance.report_engine_event(
            f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid)
        )
        try:
            for _event in core_execute_run(
                recon_job_from_origin(run.job_code_origin), run, instance, inject_env_vars=True
            ):
                pass
        except Exception:  # core_execute_run has written the failure to the event log
            pass
        finally:
            instance.report_engine_event(f"Process for run exited (pid: {pid}).", run)


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if argv[:1] == [FRESH]:
        execute(argv[2], load_instance(argv[1]))
        return
    try:
        run_id, instance, times = _wait_for_run(argv[0], argv[1:])
    except KeyboardInterrupt:  # stopped before a run came (Ctrl-C to the process group)
        return
    if not run_id:
        return  # the daemon that started it is gone
    if _changed(times):
        os.execv(sys.executable, [sys.executable, "-m", __spec__.name, FRESH, argv[0], run_id])
    execute(run_id, instance)


def _wait_for_run(
    instance_ref: str, preload: list[str]
) -> tuple[str, DagsterInstance, dict[str, float]]:
    """Load what a run needs but its definitions, then the run id from standard input ('' at its
    end)."""
    instance = load_instance(instance_ref)
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception:  # the run loads its code itself and reports what fails there
            break
    times = _source_times({"cdc_assets", *(m.split(".")[0] for m in preload)})
    return sys.stdin.readline().strip(), instance, times


if __name__ == "__main__":
    main(sys.argv[1:])
