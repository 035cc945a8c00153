"""The process the runs of :class:`.warm_launcher.WarmRunLauncher` execute in: started before its
first run comes, with Dagster, the project's modules and the instance already loaded, it reads run
ids on its standard input and executes each run in turn, as Dagster's own run worker does (the
code server's subprocess: ``core_execute_run``, the engine events around it), reporting each run's
end to the launcher.

Started by the launcher, never by hand:

    python -m cdc_assets.dagster.run_worker <instance ref> <report fd> [--first RUN_ID] <module>...

- One run at a time; after each, ``done <run id>`` on the report file descriptor (the launcher
  then hands it the next run, or closes its input). End of input: it exits.
- What a run keeps from the runs before it in the same worker is what the modules keep: Dagster
  and the project imported, and the Spark session (a Spark Connect client, or a local driver)
  that the project's Spark resource created; the definitions are built fresh for each run from its
  own code origin (Dagster's caches of the last definitions are cleared first), so a code location
  reloaded since is never stale.
- A source file changed since the worker started (of the project, of a preloaded module's package,
  or any loaded module from outside the Python installation: the user's code): it replaces itself
  with a fresh process (``os.execv``, the same pid, input and report descriptor) that runs the
  run it was handed, then serves on.
- SIGINT (the launcher's ``terminate``, or Ctrl-C to the process group) interrupts the run in
  flight as Dagster's run worker is interrupted; a worker whose run was canceled exits (it may
  have been interrupted anywhere) instead of serving another.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from dagster import DagsterInstance

FIRST = "--first"  # argv option: the run id a re-executed worker runs before reading its input
DONE = "done"  # the report line's first word after each run
CANCELED = ("CANCELED", "CANCELING")


INSTALLED = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})


class SourceWatch:
    """The source files of the loaded modules of ``packages`` (top-level names) and of those from
    outside the Python installation (the user's code: a code location, its defs)."""

    def __init__(self, packages: set[str], started: float) -> None:
        self._packages = packages
        self._started = started
        self._seen: dict[str, float] = {}  # file: its modification time when first seen
        for file in self._files():  # what is loaded now is what this process runs
            with contextlib.suppress(OSError):
                self._seen[file] = os.stat(file).st_mtime

    def _files(self) -> list[str]:
        files = []
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            if file and (name.split(".")[0] in self._packages or not file.startswith(INSTALLED)):
                files.append(file)
        return files

    def changed(self) -> bool:
        """Whether a loaded file changed since this process first saw it, or, first seen now
        (imported by a run), since the process started."""
        changed = False
        for file in self._files():
            try:
                mtime = os.stat(file).st_mtime
            except OSError:
                changed = True
                continue
            if file in self._seen:
                changed = changed or mtime != self._seen[file]
            else:
                self._seen[file] = mtime
                changed = changed or mtime > self._started
        return changed


def load_instance(instance_ref: str) -> DagsterInstance:
    from dagster import DagsterInstance
    from dagster._serdes import deserialize_value

    return DagsterInstance.from_ref(deserialize_value(instance_ref))


def forget_definitions() -> None:
    """Drop the job and repository definitions Dagster keeps from the last run of this process
    (``ReconstructableJob``'s one-entry caches): the next run builds its own."""
    from dagster._core.definitions.reconstruct import ReconstructableJob

    ReconstructableJob.get_definition.cache_clear()
    ReconstructableJob.get_repository_definition.cache_clear()


def execute(run_id: str, instance: DagsterInstance) -> bool:
    """Execute run ``run_id`` of ``instance`` as Dagster's run worker does; False when it was
    terminated (canceled)."""
    from dagster._core.events import EngineEventData
    from dagster._grpc.impl import core_execute_run
    from dagster._utils.hosted_user_process import recon_job_from_origin

    run = instance.get_run_by_id(run_id)
    if run is None or run.job_code_origin is None:
        raise SystemExit(f"run worker: run {run_id} not found, or it has no code origin")
    forget_definitions()
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
        gc.collect()
    ended = instance.get_run_by_id(run_id)
    return ended is None or ended.status.value not in CANCELED


def parse(argv: list[str]) -> tuple[str, int, str | None, list[str]]:
    """(instance ref, report fd, first run id or None, modules to preload)."""
    ref, fd, rest = argv[0], int(argv[1]), argv[2:]
    first = None
    if rest[:1] == [FIRST]:
        first, rest = rest[1], rest[2:]
    return ref, fd, first, rest


def serve(argv: list[str], started: float) -> None:
    ref, fd, first, preload = parse(argv)
    report: TextIO = os.fdopen(fd, "w", buffering=1)
    instance = load_instance(ref)
    for module in preload:
        try:
            importlib.import_module(module)
        except Exception:  # the run loads its code itself and reports what fails there
            break
    watch = SourceWatch({"cdc_assets", *(m.split(".")[0] for m in preload)}, started)
    run_id = first
    with instance:
        while True:
            if run_id is None:
                run_id = sys.stdin.readline().strip()
                if not run_id:
                    return  # the launcher closed our input, or the daemon is gone
                if watch.changed():
                    report.flush()
                    again = [ref, str(fd), FIRST, run_id, *preload]
                    os.execv(sys.executable, [sys.executable, "-m", __spec__.name, *again])
            if not execute(run_id, instance):
                return  # interrupted in the middle of something: serve no other run
            report.write(f"{DONE} {run_id}\n")
            run_id = None


def main(argv: list[str]) -> None:
    started = time.time()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from dagster._core.errors import DagsterExecutionInterruptedError

    try:
        serve(argv, started)
    except (KeyboardInterrupt, DagsterExecutionInterruptedError):
        return  # terminated (its run is canceled), or Ctrl-C to the process group


if __name__ == "__main__":
    main(sys.argv[1:])
