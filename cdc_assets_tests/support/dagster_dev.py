"""A real ``dagster dev`` (webserver, daemon, code server, run workers) on an emulated source, for
tests that drive it from outside as a user would: started in a process group of its own, stopped
with one Ctrl-C to the group (then TERM and KILL), nothing left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).with_name("dagster")
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, log: Path) -> T:
    """Poll ``probe`` until it returns something truthy; on timeout, fail with the log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}; dagster dev log:\n{tail}"
    )


@dataclass
class DagsterDev:
    url: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes]

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
        try:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


def write_project(
    tmp: Path, source_db: Path, *, sync: dict[str, Any], examples: list[str]
) -> tuple[Path, Path]:
    """A cdc_assets config for ``source_db`` and a DAGSTER_HOME like the demo's (freshness on,
    telemetry off, queued runs launched within a second)."""
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
                    }
                ],
                "storage": {"base_path": str(tmp / "storage")},
                # as the demo's config: a faster-starting driver JVM (one per run)
                "spark": {
                    "master": "local[2]",
                    "conf": {
                        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                    },
                },
                "examples": examples,
            }
        )
    )
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\nfreshness:\n  enabled: true\n"
        "run_coordinator:\n  module: dagster\n  class: QueuedRunCoordinator\n"
        "  config:\n    dequeue_interval_seconds: 1\n"
    )
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
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(DAGSTER),
                "dev",
                "-w",
                str(ROOT / "workspace.yaml"),
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    dev = DagsterDev(f"http://127.0.0.1:{port}", home, log, process)
    try:
        wait_for("the Dagster webserver", dev.answering, timeout, log)
        wait_for("the code location to load", lambda: _location_loaded(dev), timeout, log)
        # The "join the community" dialog shows once per instance on localhost: seen.
        dev.graphql("mutation { setNuxSeen }")
        yield dev
    finally:
        _stop_group(process)


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


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    for sig, patience in ((signal.SIGINT, 60), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            if not _group_alive(process.pid):
                process.wait(timeout=5)
                return
            process.poll()
            time.sleep(0.2)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # zombies of the group count as gone
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout
    return any(
        line.split()[0] == str(pgid) and not line.split()[1].startswith("Z")
        for line in out.splitlines()
        if line.strip()
    )
