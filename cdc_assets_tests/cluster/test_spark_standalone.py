"""The production path on a real Spark cluster: a standalone master and one worker started from
the pyspark installation (``bin/spark-class``), and a sync — the ``snapshot`` run, a range run
and a mirror-equals-source check — whose config names the master's ``spark://`` URL.

The test session holds a local SparkSession already (one per process), so the sync runs in a
subprocess, :mod:`.standalone_runner`; it prints its evidence as one JSON line. The reads must
have run on the executor the worker launched: every call of the data source's ``read`` descends
from the worker JVM this test started through an executor backend of the runner's application,
never from the runner (the driver); and Spark's REST API counts the tasks on that executor and
none on the driver. With a local master (the runner's spec may name one, e.g. ``local[2]``) all
of :func:`reads_ran_on_executors`'s checks fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from cdc_assets_tests.support.jvm import FAST_JVM
from cdc_assets_tests.support.net import free_port

from . import standalone_runner

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT = 60.0
# a guard against a hung runner, not a speed limit: 120-135 s here, over 150 s in CI beside
# the other pytest worker's Spark
RUNNER_TIMEOUT = 600.0
STOP_TIMEOUT = 15.0


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def _tail(path: Path, chars: int = 2500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"({exc})"


@dataclass
class Cluster:
    """A standalone master and one worker, each its own process group."""

    root: Path
    master: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    master_webui: int
    url: str = ""  # the master's, as it reports it (a taken port makes Spark try the next)
    worker_json_url: str = ""

    @property
    def master_json_url(self) -> str:
        return f"http://127.0.0.1:{self.master_webui}/json/"

    def logs(self) -> str:
        """The tails of the master's, the worker's and every executor's logs."""
        parts = [f"--- master log:\n{_tail(self.root / 'master.log')}"]
        parts.append(f"--- worker log:\n{_tail(self.root / 'worker.log')}")
        for stderr in sorted((self.root / "work").glob("app-*/*/stderr")):
            parts.append(f"--- executor {stderr.parent.name} of {stderr.parent.parent.name}:")
            parts.append(_tail(stderr, 1500))
        return "\n".join(parts)

    def wait_alive(self) -> None:
        """Return once the worker is ALIVE at the master; note their addresses."""
        deadline = time.monotonic() + START_TIMEOUT
        state: Any = None
        while time.monotonic() < deadline:
            for name, process in (("master", self.master), ("worker", self.worker)):
                assert process.poll() is None, (
                    f"the {name} exited with {process.returncode}\n{self.logs()}"
                )
            with contextlib.suppress(OSError, ValueError):
                state = _get_json(self.master_json_url)
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if alive:
                    self.url = str(state["url"])
                    self.worker_json_url = f"{alive[0]['webuiaddress']}/json/"
                    return
            time.sleep(0.25)
        raise AssertionError(
            f"no worker ALIVE after {START_TIMEOUT:.0f} s; master says {state}\n{self.logs()}"
        )

    def stop(self) -> None:
        """SIGTERM each process group (the worker's holds its executors), then SIGKILL."""
        for process in (self.worker, self.master):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in (self.worker, self.master):
            while time.monotonic() < deadline and _group_alive(process.pid):
                process.poll()  # reap the leader, so it does not keep the group "alive"
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def standalone_cluster(root: Path) -> Iterator[Cluster]:
    """Master and worker from ``<pyspark>/bin/spark-class`` on 127.0.0.1, stopped at the end."""
    (root / "work").mkdir(parents=True)
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_LOG_DIR": str(root),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        # The daemons only schedule: the client compiler and the serial collector start them
        # in about half the time on 2 busy cores.
        "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
        "SPARK_DAEMON_MEMORY": "512m",
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_port, master_webui, worker_webui = free_port(), free_port(), free_port()

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(root / f"{name}.log", "wb") as log:
            return subprocess.Popen(
                [spark_class, *args],
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, killed as one at the end
            )

    master = start(
        "master",
        "org.apache.spark.deploy.master.Master",
        *("--host", "127.0.0.1", "--port", str(master_port), "--webui-port", str(master_webui)),
    )
    try:
        worker = start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            f"spark://127.0.0.1:{master_port}",
            *("--host", "127.0.0.1", "--cores", "2", "--memory", "2g"),
            *("--webui-port", str(worker_webui)),
        )
    except BaseException:
        os.killpg(master.pid, signal.SIGKILL)
        master.wait()
        raise
    cluster = Cluster(root, master, worker, master_webui)
    try:
        yield cluster
    finally:
        cluster.stop()


def reads_ran_on_executors(result: dict[str, Any], worker_pid: int) -> list[str]:
    """What is wrong with the runner's evidence (empty: every read ran on an executor of the
    worker ``worker_pid``, in the runner's application, and Spark counted tasks there only)."""
    problems: list[str] = []
    app_id = result["app_id"]
    executors = {e["id"]: e for e in result["executors"]}
    busy = {i for i, e in executors.items() if i != "driver" and (e["totalTasks"] or 0) > 0}
    if not busy:
        problems.append(f"no executor other than the driver ran tasks: {result['executors']}")
    driver_tasks = executors.get("driver", {}).get("totalTasks")
    if driver_tasks != 0:
        problems.append(f"the driver ran {driver_tasks} tasks itself")
    probes = result["probes"]
    if not probes:
        problems.append("no read of the data source left a probe record")
    for probe in probes:
        where = f"{probe['phase']} read of {probe['instance']} piece {probe['piece']}"
        pids = [p["pid"] for p in probe["ancestry"]]
        backends = [
            p
            for p in probe["ancestry"]
            if p.get("main_class") == "org.apache.spark.executor.CoarseGrainedExecutorBackend"
        ]
        if worker_pid not in pids:
            problems.append(f"{where}: not under the worker (pid {worker_pid}): {pids}")
        if result["runner_pid"] in pids:
            problems.append(f"{where}: ran under the driver process {result['runner_pid']}")
        if not backends:
            problems.append(f"{where}: no executor backend among its parents: {probe['ancestry']}")
        for backend in backends:
            if backend.get("app_id") != app_id:
                problems.append(f"{where}: executor of {backend.get('app_id')}, not {app_id}")
            if backend.get("executor_id") not in busy:
                problems.append(
                    f"{where}: executor {backend.get('executor_id')} is not one that ran tasks"
                )
    return problems


def _run(cluster: Cluster, root: Path) -> tuple[dict[str, Any] | None, str, int, float]:
    """Start the runner at once (it prepares the source while the cluster starts) and wait."""
    spec = root / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "work": str(root / "runner"),
                "master_webui_port": cluster.master_webui,
                "driver_ui_port": free_port(),
            }
        )
    )
    (root / "runner").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_GATEWAY", "SPARK_"))}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    started = time.monotonic()
    with open(root / "runner.log", "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "cdc_assets_tests.cluster.standalone_runner", str(spec)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    try:
        cluster.wait_alive()
        try:
            stdout, _ = process.communicate(timeout=RUNNER_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the runner did not end within {RUNNER_TIMEOUT:.0f} s\n--- runner log:\n"
                f"{_tail(root / 'runner.log', 4000)}\n{cluster.logs()}"
            ) from None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    finally:
        # the driver JVM and its Python workers, if the runner left any
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    seconds = time.monotonic() - started
    lines = stdout.decode(errors="replace").splitlines()
    found = [ln for ln in lines if ln.startswith(standalone_runner.RESULT_PREFIX)]
    result = json.loads(found[-1][len(standalone_runner.RESULT_PREFIX) :]) if found else None
    return result, _tail(root / "runner.log", 4000), process.returncode, seconds


def _app_on_cluster(cluster: Cluster, app_id: str) -> tuple[list[Any], list[Any]]:
    """The master's completed entries and the worker's executors of ``app_id``."""
    deadline = time.monotonic() + 10
    while True:
        master = _get_json(cluster.master_json_url)
        worker = _get_json(cluster.worker_json_url)
        apps = [
            a
            for a in (*master.get("activeapps", []), *master.get("completedapps", []))
            if a.get("id") == app_id
        ]
        executors = [
            e
            for e in (*worker.get("executors", []), *worker.get("finishedexecutors", []))
            if e.get("appid") == app_id
        ]
        if (apps and executors) or time.monotonic() > deadline:
            return apps, executors
        time.sleep(0.25)


def test_snapshot_and_range_on_a_standalone_cluster(tmp_path: Path) -> None:
    started = time.monotonic()
    with standalone_cluster(tmp_path / "cluster") as cluster:
        result, runner_log, returncode, seconds = _run(cluster, tmp_path)

        def context() -> str:
            return f"--- runner log:\n{runner_log}\n{cluster.logs()}"

        assert returncode == 0 and result is not None, (
            f"the runner failed (exit {returncode}, {seconds:.0f} s)\n{context()}"
        )
        assert cluster.url.startswith("spark://127.0.0.1:"), cluster.url
        assert result["master"] == cluster.url, (
            f"the session's master: {result['master']}, not {cluster.url}\n{context()}"
        )
        assert result["master_app"] and result["master_app"]["cores"] == 2, (
            f"the master's view of the application: {result['master_app']}\n{context()}"
        )

        # The sync itself: the snapshot, then at least one range; mirrors equal the source.
        assert result["runs"]["snapshot"][:1] == ["snapshot"], result["runs"]
        assert result["runs"]["range"], f"no range run after the workload: {result['runs']}"
        assert result["verified_lsn"].startswith("0x"), result["verified_lsn"]

        # Every read of the data source ran on the worker's executor, for every table.
        problems = reads_ran_on_executors(result, cluster.worker.pid)
        assert not problems, "\n".join(problems[:20]) + f"\n{context()}"
        probes = result["probes"]
        tables = set(result["tables"])
        for phase, kind in (("snapshot", "snapshot"), ("range", "changes")):
            read = [p for p in probes if p["phase"] == phase and p["kind"] == kind]
            assert {p["instance"] for p in read} == tables, f"{phase}: reads {read}"
            assert sum(p["rows"] for p in read) > 0, f"{phase}: no rows read: {read}"
        snapshot_tasks = [p for p in probes if p["phase"] == "snapshot"]
        assert len(snapshot_tasks) > len(tables), "the snapshot was not split into key ranges"

        # The cluster's own records: the application ran there, with an executor on the worker.
        apps, executors = _app_on_cluster(cluster, result["app_id"])
        assert apps, f"the master does not know {result['app_id']}\n{context()}"
        assert executors, f"the worker ran no executor of {result['app_id']}\n{context()}"

    busy = [e for e in result["executors"] if e["id"] != "driver"]
    evidence = {
        "executors": busy,
        "reads": len(probes),
        "python_workers": sorted({p["pid"] for p in probes}),
        "runner_seconds": round(seconds, 1),
        "total_seconds": round(time.monotonic() - started, 1),
    }
    print(f"standalone cluster evidence: {json.dumps(evidence)}")
