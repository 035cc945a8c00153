"""A real ``dagster dev`` (webserver, daemon, code server, run workers) on an emulated source, for
the tests and the benchmarks that drive it from outside as a user would: started in a process
group of its own (:class:`cdc_assets.process_group.ProcessGroup`: it gets SIGTERM if the test or
benchmark dies first), stopped with one Ctrl-C to the group (then TERM and KILL), nothing left
behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from dagster import DagsterInstance, RunsFilter

from cdc_assets.dagster.demo.instance_settings import write_instance_settings
from cdc_assets.process_group import ProcessGroup
from cdc_assets_tests.support.jvm import FAST_JVM
from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).with_name("dagster")
T = TypeVar("T")


def dagster_dev_command(port: int, workspace: Path = ROOT / "workspace.yaml") -> list[str]:
    return [str(DAGSTER), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)]


def server_answers(url: str) -> bool:
    """The Dagster webserver at ``url`` answers."""
    try:
        with urllib.request.urlopen(f"{url}/server_info", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    log: Path,
    seen: Mapping[str, Any] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; on timeout, fail with what the probe
    last recorded in ``seen`` (if given) and the log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    last = f" (last seen: {dict(seen)})" if seen is not None else ""
    try:
        runs = runs_report(log.parent)
    except Exception as error:  # the diagnosis must never hide the timeout itself
        runs = f"(could not list the runs: {error!r})\n"
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}{last}; {runs}{log_tail(log)}"
    )


# The daemons' lines of every tick: they crowd the runs' events out of a log's tail.
_TICK_LINES = (
    "dagster.daemon.AssetDaemon",
    "Checking for new runs",
    "QueuedRunCoordinatorDaemon",
    "skipped: run",
)
PY_SPY = Path(sys.executable).with_name("py-spy")


def runs_report(tmp: Path, events: int = 12) -> str:
    """The newest runs of the instance ``tmp/dagster_home`` and their status; of each run not
    finished, its last events and where its process stands (``py-spy dump`` of the run worker),
    so a hung run says where it hangs."""
    home = tmp / "dagster_home"
    if not (home / "dagster.yaml").exists():
        return ""
    out = []
    with DagsterInstance.from_config(str(home)) as instance:
        records = instance.get_run_records(RunsFilter(), limit=20)
        out.append("latest runs (newest first):")
        for record in records[:8]:
            run = record.dagster_run
            key = run.tags.get("dagster/partition", "")
            out.append(f"  {run.run_id[:8]} {run.job_name} {key} {run.status.value}")
        for state in instance.all_instigator_state():  # the sensors' and schedules' last ticks
            ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=3)
            for tick in ticks:
                why = tick.error.message[:300] if tick.error else (tick.skip_reason or "")
                out.append(
                    f"  tick of {tick.instigator_name} "
                    f"{time.strftime('%H:%M:%S', time.gmtime(tick.timestamp))} "
                    f"{tick.status.value} runs={list(tick.run_ids)} {why}"
                )
        for record in records:
            run = record.dagster_run
            if run.is_finished:
                continue
            out.append(f"run {run.run_id} of {run.job_name} {run.status.value} {run.tags}:")
            logs = instance.all_logs(run.run_id)
            for entry in logs[-events:]:
                kind = entry.dagster_event.event_type_value if entry.dagster_event else "log"
                out.append(
                    f"  {time.strftime('%H:%M:%S', time.gmtime(entry.timestamp))} "
                    f"{entry.step_key or ''} {kind} {entry.user_message[:160]}"
                )
            # the run worker (and steps'): the process ids their events were reported from
            pids = {e.dagster_event.pid for e in logs if e.dagster_event and e.dagster_event.pid}
            for pid in sorted(pids):
                out.extend(_stack(pid))
    return "\n".join(out) + "\n"


def _stack(pid: int) -> list[str]:
    """``py-spy dump`` of process ``pid`` (its Python threads' stacks), if it still runs."""
    if not PY_SPY.exists() or not Path(f"/proc/{pid}").exists():
        return []
    dump = subprocess.run(
        [str(PY_SPY), "dump", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [f"  py-spy dump of {pid}:"] + [
        # the innermost frames of the first threads: a longer dump hid the next run's report
        f"    {line}"
        for line in (dump.stdout + dump.stderr).splitlines()[:40]
    ]


def log_tail(log: Path, chars: int = 3000) -> str:
    """The runs' events and the daemons' decisions at the end of ``log`` (ticks left out),
    then its last lines as they are."""
    if not log.exists():
        return "(no dagster dev log)"
    lines = log.read_text(errors="replace").splitlines()
    events = "\n".join(line for line in lines if not any(t in line for t in _TICK_LINES))
    last = "\n".join(lines[-8:])
    return f"dagster dev log without ticks:\n{events[-chars:]}\n... its last lines:\n{last}"


@dataclass
class DagsterDev:
    url: str
    home: Path
    log: Path
    group: ProcessGroup

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            result = json.loads(response.read())
        assert not result.get("errors"), result["errors"]
        return result["data"]

    def answering(self) -> bool:
        return server_answers(self.url)


def write_project(
    tmp: Path,
    source_db: Path,
    *,
    sync: dict[str, Any],
    examples: list[str],
    spark_remote: str | None = None,
    maintenance: dict[str, Any] | None = None,
    source_settings: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """A cdc_assets config for ``source_db`` and a DAGSTER_HOME with the demo's ``dagster.yaml``
    (freshness on, telemetry and the community dialog off, queued runs launched within a second,
    into warm run workers, at most 4 at once). Runs attach to
    the Spark Connect server ``spark_remote`` names (as the demo's do), else each starts a driver
    of its own.
    ``maintenance``: the source's maintenance policy (default: the config's);
    ``source_settings``: more settings of the source (``history``, ``columns``)."""
    # as the demo's config: a faster-starting driver JVM when a run starts one
    spark: dict[str, Any] = (
        {"remote": spark_remote}
        if spark_remote
        else {
            "master": "local[2]",
            "conf": {"spark.driver.extraJavaOptions": FAST_JVM},
        }
    )
    config = tmp / "cdc_assets.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sources": [
                    {
                        "name": "demo",
                        "connection": {"emulator": {"path": str(source_db)}},
                        "sync": sync,
                        "owners": ["team:data-platform"],
                        **({"maintenance": maintenance} if maintenance else {}),
                        **(source_settings or {}),
                    }
                ],
                "storage": {"base_path": str(tmp / "storage")},
                "spark": spark,
                "examples": examples,
            }
        )
    )
    home = tmp / "dagster_home"
    write_instance_settings(home)  # make demo's own dagster.yaml
    return config, home


@contextmanager
def dagster_dev(
    tmp: Path, config: Path, home: Path, *, timeout: float = 180
) -> Iterator[DagsterDev]:
    """``dagster dev -w workspace.yaml`` on ``config``; yields once the code location is loaded."""
    port = free_port()
    log = tmp / "dagster_dev.log"
    env = {
        **os.environ,
        "CDC_ASSETS_CONFIG": str(config),
        "DAGSTER_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    group = ProcessGroup(dagster_dev_command(port), log, env, ROOT)
    dev = DagsterDev(f"http://127.0.0.1:{port}", home, log, group)
    try:
        wait_for("the Dagster webserver", dev.answering, timeout, log)
        wait_for("the code location to load", lambda: _location_loaded(dev), timeout, log)
        yield dev
    finally:
        group.stop(60)


def _location_loaded(dev: DagsterDev) -> bool:
    data = dev.graphql(
        "{ workspaceOrError { ... on Workspace { locationEntries { loadStatus "
        "locationOrLoadError { __typename ... on PythonError { message } } } } } }"
    )
    entries = data["workspaceOrError"]["locationEntries"]
    for entry in entries:
        error = entry["locationOrLoadError"]
        if error and error["__typename"] == "PythonError":
            raise AssertionError(f"the code location failed to load: {error['message']}")
    return bool(entries) and all(e["loadStatus"] == "LOADED" for e in entries)
