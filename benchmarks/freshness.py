"""Benchmark: freshness in the ``dagster dev`` setup: commit in the source → row visible in the
mirror, and where the time goes (issue 7, question 5). Target: capture latency + 10 s.

Per variant it builds a fresh emulated demo source in a temporary directory (``cdc-assets emulator
create``, then the capture scan), writes a project config (storage in the temporary directory) and
a ``DAGSTER_HOME`` with a ``dagster.yaml`` as ``scripts/demo.sh`` writes it, and starts the real
``dagster dev -w workspace.yaml`` on a free port in a process group of its own. Once the sensor has
taken the snapshot and every mirror exists, ``cdc-assets emulator workload`` (with its capture
agent) runs at ``--tps`` for ``--seconds``; the benchmark waits until the mirrors hold the last
commit and stops the whole process group. Then it measures, for every committed transaction:

- commit time: ``cdc.lsn_time_mapping.tran_end_time``;
- captured: the first time the benchmark saw ``sys.fn_cdc_get_max_lsn()`` at or above the
  commit's LSN (sampled every 0.1 s);
- visible: the first ``ASSET_MATERIALIZATION`` event (Dagster event log) of the mirror of every
  table the transaction touched (its LSN in that table's change table) with ``mirror_lsn`` at or
  above the commit's LSN;

and, per range run, where the time went, from the event log (sensor tick, run creation,
``RUN_ENQUEUED`` … ``RUN_SUCCESS``, steps, materializations) and Spark's event log (switched on
through the project config's ``spark.conf``: the SparkContext's start and the Spark jobs).

Variants (each on its own fresh source; the ratios are against ``default`` of the same run):

- ``default``: the demo's setup (``sensor_interval_seconds: 5``, Dagster's run queue, no JVM
  options);
- ``tuned``: only settings a deployment owns, no product code: sensor interval 1 s, the run
  queue's ``dequeue_interval_seconds: 1``, and driver JVM options in the project config's
  ``spark.conf`` (client JIT, serial GC, and a class-data-sharing archive of the classes a Spark
  start loads, recorded at the start of this run);
- ``in-process``: no ``dagster dev``: the sync sensor's ``evaluate()`` in a loop and each run it
  asks for executed in this process on one Spark session kept across runs (what an in-process
  run launcher with a long-lived Spark session would give; no run queue, process or Spark start).

After the variants it times, in fresh processes, Spark's start with each JVM option against the
default, the code location's load, and (when the Python packages of ``pyspark[connect]`` are
importable, e.g. from ``.venv/bench-deps``) a session on a long-running Spark Connect server (the
``spark-connect`` jar ships in the pyspark wheel). Spark's event log is on in every variant (for
the breakdown); the in-process variant also turns Spark's console progress bar off.

The code of this checkout is what runs (it goes first on ``PYTHONPATH``), whatever checkout the
venv's editable install points at.

    .venv/bin/python benchmarks/freshness.py            # 300 s of workload per variant (~30 min)
    .venv/bin/python benchmarks/freshness.py --quick    # 60 s per variant, fewer repetitions
    .venv/bin/python benchmarks/freshness.py --keep DIR # keep sources, storage, logs, event logs
    .venv/bin/python benchmarks/freshness.py --reanalyze DIR  # report again from a kept DIR
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The project code of this checkout, here and in every process started below.
sys.path.insert(1, str(ROOT))

import _common  # noqa: E402
import yaml  # noqa: E402
from _common import machine_line  # noqa: E402

from cdc_assets import emulator  # noqa: E402
from cdc_assets.config import load_config  # noqa: E402
from cdc_assets.dagster.names import PARTITION_TAG  # noqa: E402
from cdc_assets.dagster.partitions import parse_partition  # noqa: E402
from cdc_assets.dagster.source import Source, load_source  # noqa: E402
from cdc_assets.lsn import Lsn  # noqa: E402
from cdc_assets.spark.session import session_conf  # noqa: E402
from cdc_assets.sqlserver import find_max_lsn, last_transaction_lsn  # noqa: E402

TARGET_SLACK = 10.0
SOURCE = "demo"
BIN = Path(sys.executable).parent
SAMPLE_SECONDS = 0.1
FAST_JIT = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DAGSTER_YAML = """\
# written by benchmarks/freshness.py, as scripts/demo.sh writes it{extra}
telemetry:
  enabled: false
concurrency:
  runs:
    max_concurrent_runs: 4
retention:
  sensor:
    purge_after_days:
      skipped: 1
"""


@dataclass(frozen=True)
class Variant:
    name: str
    sensor_interval: int
    dequeue_interval: int | None  # None: Dagster's default (5 s)
    java_options: str  # "{cds}" stands for the class-data-sharing archive
    in_process: bool = False  # no dagster dev: ticks and runs in this process, one Spark session

    def describe(self) -> str:
        if self.in_process:
            return (
                "no dagster dev: the sensor's evaluate() in a loop (0.2 s apart when idle) and "
                "each run it asks for executed in this process (execute_in_process) on one Spark "
                "session kept across runs: what an in-process run launcher with a long-lived "
                "Spark session would give"
            )
        queue = (
            "Dagster's default run queue (dequeue every 5 s)"
            if self.dequeue_interval is None
            else f"run queue dequeue_interval_seconds {self.dequeue_interval}"
        )
        java = self.java_options.replace("{cds}", "<archive>") or "none"
        return (
            f"sensor_interval_seconds {self.sensor_interval}, {queue}, driver JVM options: {java}"
        )


VARIANTS = {
    "default": Variant("default", 5, None, ""),
    "tuned": Variant("tuned", 1, 1, f"{FAST_JIT} -XX:SharedArchiveFile={{cds}}"),
    "in-process": Variant("in-process", 1, None, "", in_process=True),
}
IDLE_SLEEP = 0.2


# -- small helpers ---------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fmt(value: float, width: int = 7) -> str:
    return f"{value:{width}.2f}" if not math.isnan(value) else "-".rjust(width)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.update(extra)
    return env


def local_timestamp(value: dt.datetime) -> float:
    """Unix time of the emulator's server clock (naive local time, like GETDATE())."""
    return value.timestamp()


def utc_timestamp(value: dt.datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()


class Group:
    """A command in a process group of its own; ``stop`` ends every process of the group."""

    def __init__(self, args: Sequence[str], log: Path, env: dict[str, str], cwd: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                list(args),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        self.pgid = self.proc.pid

    def members(self) -> list[str]:
        out = subprocess.run(
            ["ps", "-eo", "pgid=,pid=,stat=,args="], capture_output=True, text=True, check=False
        ).stdout
        found = []
        for line in out.splitlines():
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[0] == str(self.pgid) and not parts[2].startswith("Z"):
                found.append(f"{parts[1]} {parts[3][:70] if len(parts) > 3 else ''}")
        return found

    def send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(self, patience: float, first: int = signal.SIGINT) -> str:
        """``first`` to the group, ``patience`` s for all of it to exit, then TERM and KILL;
        returns what had to be killed ('' when the group exited on ``first``)."""
        self.send(first)
        deadline = time.monotonic() + patience
        while self.members() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.members()
        if left:
            self.send(signal.SIGTERM)
            deadline = time.monotonic() + 5
            while self.members() and time.monotonic() < deadline:
                time.sleep(0.2)
            self.send(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        return "; ".join(left)

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


class LsnSampler:
    """Samples ``sys.fn_cdc_get_max_lsn()`` every ``SAMPLE_SECONDS`` in a thread."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.times: list[float] = []
        self.lsns: list[int] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="max-lsn-sampler", daemon=True)

    @classmethod
    def from_samples(cls, times: list[float], lsns: list[int]) -> LsnSampler:
        sampler = cls(Path())
        sampler.times, sampler.lsns = list(times), list(lsns)
        return sampler

    def __enter__(self) -> LsnSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        conn = emulator.connect(self.db, autocommit=True)
        try:
            highest = -1
            while not self._stop.is_set():
                try:
                    value = find_max_lsn(conn)
                except Exception:
                    self.errors += 1
                    value = None
                now = time.time()
                if value is not None and int(value) > highest:
                    highest = int(value)
                    self.times.append(now)
                    self.lsns.append(highest)
                self._stop.wait(SAMPLE_SECONDS)
        finally:
            conn.close()

    def captured_at(self, lsn: int) -> float | None:
        index = bisect.bisect_left(self.lsns, lsn)
        return self.times[index] if index < len(self.lsns) else None

    @property
    def highest(self) -> int:
        return self.lsns[-1] if self.lsns else -1


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, alive: Group | InProcess
) -> float:
    started = time.monotonic()
    if isinstance(alive, InProcess):
        alive.work_until(check, timeout)
        if not check():
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        return time.monotonic() - started
    while not check():
        if alive.proc.poll() is not None:
            raise SystemExit(f"dagster dev exited while waiting for {what}:\n{alive.tail()}")
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}:\n{alive.tail()}")
        time.sleep(0.5)
    return time.monotonic() - started


class InProcess:
    """The ``in-process`` variant's stand-in for dagster dev: the sync sensor's decision and
    the run it asks for, both in this process, on an instance in ``home`` and one Spark session
    (the definitions' Spark resource keeps it across runs)."""

    def __init__(self, config_path: Path, home: Path, source: Source) -> None:
        from dagster import DagsterInstance

        from cdc_assets.dagster.definitions_builder import build_definitions
        from cdc_assets.dagster.names import partitions_name, sync_job_name

        self.source = source
        self.defs = build_definitions(load_config(config_path), [source])
        self.job = self.defs.resolve_job_def(sync_job_name(source.name))
        self.partitions_name = partitions_name(source.name)
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.instance = DagsterInstance.from_config(str(home))
        self.proc = self  # ``poll()`` for wait_for's liveness check
        self.failed = 0
        self.quiet = False

    def poll(self) -> None:
        return None

    def tick(self) -> bool:
        from cdc_assets.dagster.sync_sensor import evaluate

        decision = evaluate(self.instance, self.source, self.job.partitions_def)
        request = decision.run_request
        if request is None:
            return False
        if decision.new_partition is not None:
            self.instance.add_dynamic_partitions(self.partitions_name, [decision.new_partition])
        result = _common.execute_request(self.job, self.instance, request)
        self.failed += not result.success
        if not self.quiet:  # Spark logs to this process's console here: warnings and errors only
            from pyspark.sql import SparkSession

            session = SparkSession.getActiveSession()
            if session is not None:
                session.sparkContext.setLogLevel("ERROR")
                self.quiet = True
        return True

    def work_until(self, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            if not self.tick():
                time.sleep(IDLE_SLEEP)

    def stop(self, _patience: float) -> str:
        from pyspark.sql import SparkSession

        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
        self.instance.dispose()
        return ""

    def members(self) -> list[str]:
        return []

    def tail(self, lines: int = 15) -> str:
        return f"{self.failed} failed runs"


def ui_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def mirror_lsns(source: Source) -> list[int | None]:
    found = []
    for table in source.tables:
        state = source.store.properties(table.mirror_key.path, None)
        found.append(int(Lsn.parse(state["lsn"])) if state and "lsn" in state else None)
    return found


# -- one variant -----------------------------------------------------------------------------


@dataclass
class Commit:
    lsn: int
    committed: float
    tables: set[str]
    captured: float | None = None
    visible: float | None = None
    run_id: str | None = None


@dataclass
class RunInfo:
    run_id: str
    partition: str
    lo: int | None
    hi: int | None
    created: float
    status: str
    events: dict[str, float] = field(default_factory=dict)  # first occurrence of each type
    steps: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    mirrors: list[tuple[float, str, int]] = field(default_factory=list)
    tick: float | None = None
    spark_app: dict[str, Any] | None = None


def write_setup(workdir: Path, variant: Variant, cds: Path | None) -> tuple[Path, Path, Path]:
    db = workdir / "source.db"
    events = workdir / "spark-events"
    events.mkdir()
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    if variant.in_process:  # its Spark logs to this process's console
        conf["spark.ui.showConsoleProgress"] = "false"
    if variant.java_options:
        conf["spark.driver.extraJavaOptions"] = variant.java_options.replace(
            "{cds}", str(cds or "")
        )
    config = {
        "sources": [
            {
                "name": SOURCE,
                "connection": {"emulator": {"path": str(db)}},
                "tables": {"include": ["*"], "exclude": []},
                "sync": {
                    "sensor_interval_seconds": variant.sensor_interval,
                    "min_range_interval_seconds": 0,
                    "max_transactions_per_range": 10000,
                },
                "snapshot": {"mode": "auto", "chunk_rows": 250000},
            }
        ],
        "storage": {"base_path": str(workdir / "storage")},
        "spark": {"master": "local[2]", "conf": conf},
    }
    config_path = workdir / "cdc_assets.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    home = workdir / "dagster_home"
    home.mkdir()
    extra = ""
    if variant.dequeue_interval is not None:
        extra = (
            "\nrun_coordinator:\n  module: dagster\n  class: QueuedRunCoordinator\n  config:\n"
            f"    dequeue_interval_seconds: {variant.dequeue_interval}"
        )
    text = DAGSTER_YAML.format(extra=extra)
    (home / "dagster.yaml").write_text(text)
    return db, config_path, home


def run_variant(
    args: argparse.Namespace, variant: Variant, workdir: Path, cds: Path | None
) -> dict[str, Any]:
    """Sets up, runs and stops one variant; what it measured on the way (``meta.json``)."""
    db, config_path, home = write_setup(workdir, variant, cds)
    env = child_env(CDC_ASSETS_CONFIG=str(config_path), DAGSTER_HOME=str(home))
    meta: dict[str, Any] = {"variant": variant.name, "setup": {}}
    started = time.monotonic()
    rows = str(args.rows)
    subprocess.run(
        [str(BIN / "cdc-assets"), "emulator", "create", str(db), "--seed", "0", "--rows", rows],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _common.capture(db)
    meta["setup"]["source created and captured"] = time.monotonic() - started
    source = load_source(load_config(config_path).sources[0], workdir / "storage")
    agent = emulator.CaptureAgent(db).start()  # until the workload's own agent takes over
    workload_args = ("--tps", str(args.tps), "--seed", "1", "--seconds", str(args.seconds))
    if variant.in_process:
        dagster: Group | InProcess = InProcess(config_path, home, source)
    else:
        port = free_port()
        host = ("-h", "127.0.0.1", "-p")
        dagster = Group(
            [str(BIN / "dagster"), "dev", "-w", str(ROOT / "workspace.yaml"), *host, str(port)],
            workdir / "dagster-dev.log",
            env,
            ROOT,
        )
    workload: Group | None = None
    try:
        with LsnSampler(db) as sampler:
            if isinstance(dagster, Group):
                meta["setup"]["dagster dev: UI answers"] = wait_for(
                    "the Dagster UI", lambda: ui_answers(port), 300, dagster
                )
            meta["setup"]["then: every mirror exists (snapshot run, first range)"] = wait_for(
                "the first mirrors",
                lambda: all(x is not None for x in mirror_lsns(source)),
                args.setup_timeout,
                dagster,
            )
            agent.stop()
            meta["baseline_lsn"] = sampler.highest
            meta["workload_started"] = time.time()
            workload = Group(
                [str(BIN / "cdc-assets"), "emulator", "workload", str(db), *workload_args],
                workdir / "workload.log",
                env,
                workdir,
            )
            if isinstance(dagster, InProcess):
                dagster.work_until(lambda: workload.proc.poll() is not None, args.seconds + 120)
            if workload.proc.wait(args.seconds + 120) != 0:
                raise SystemExit(f"the workload failed:\n{workload.tail()}")
            meta["workload_ended"] = time.time()
            meta["workload_summary"] = workload.tail(1)
            _common.capture(db)  # whatever the workload's agent had not captured when it ended
            last = last_commit_lsn(db)
            waited = time.monotonic()
            wait_for(
                "the mirrors to reach the last commit",
                lambda: all(x is not None and x >= last for x in mirror_lsns(source)),
                args.drain_timeout,
                dagster,
            )
            meta["drain"] = time.monotonic() - waited
            time.sleep(1)
        meta["sampler"] = {"times": sampler.times, "lsns": sampler.lsns, "errors": sampler.errors}
    finally:
        agent.stop()
        if workload is not None and workload.proc.poll() is None:
            workload.stop(15)
        meta["killed"] = dagster.stop(90)
        meta["leftover"] = dagster.members()
        meta["load"] = os.getloadavg()
        (workdir / "meta.json").write_text(json.dumps(meta))
    return meta


def analyze(workdir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Commits, runs and ticks of a variant's directory, joined."""
    config_path = workdir / "cdc_assets.yaml"
    source = load_source(load_config(config_path).sources[0], workdir / "storage")
    sampler = LsnSampler.from_samples(meta["sampler"]["times"], meta["sampler"]["lsns"])
    commits = read_commits(workdir / "source.db", source, meta["baseline_lsn"])
    for commit in commits:
        commit.captured = sampler.captured_at(commit.lsn)
    runs, ticks = read_dagster(workdir / "dagster_home", meta["workload_started"] - 120)
    attach_spark(runs, workdir / "spark-events")
    assign_visibility(commits, runs, source)
    return {
        **meta,
        "variant": VARIANTS[meta["variant"]],
        "commits": commits,
        "runs": runs,
        "ticks": ticks,
    }


def last_commit_lsn(db: Path) -> int:
    conn = emulator.connect(db, autocommit=True)
    try:
        last = last_transaction_lsn(conn)
        return int(last) if last is not None else -1
    finally:
        conn.close()


def read_commits(db: Path, source: Source, after: int) -> list[Commit]:
    conn = emulator.connect(db, autocommit=True)
    try:
        cursor = conn.cursor()
        touched: dict[int, set[str]] = {}
        for table in source.tables:
            cursor.execute(f"SELECT DISTINCT [__$start_lsn] FROM [cdc].[{table.instance.name}_CT]")
            for (value,) in cursor.fetchall():
                touched.setdefault(int(Lsn.from_bytes(value)), set()).add(table.instance.name)
        cursor.execute("SELECT start_lsn, tran_end_time, tran_id FROM cdc.lsn_time_mapping")
        commits = []
        for start_lsn, end_time, tran_id in cursor.fetchall():
            lsn = int(Lsn.from_bytes(start_lsn))
            if lsn <= after or not any(tran_id) or lsn not in touched:
                continue
            commits.append(Commit(lsn, local_timestamp(end_time), touched[lsn]))
    finally:
        conn.close()
    return sorted(commits, key=lambda c: c.lsn)


def read_dagster(home: Path, since: float) -> tuple[list[RunInfo], list[float]]:
    from dagster import DagsterEventType, DagsterInstance
    from dagster._core.scheduler.instigation import InstigatorType

    wanted = {
        DagsterEventType.RUN_ENQUEUED.value: "enqueued",
        DagsterEventType.RUN_STARTING.value: "starting",
        DagsterEventType.RUN_START.value: "started",
        DagsterEventType.RUN_SUCCESS.value: "success",
        DagsterEventType.RUN_FAILURE.value: "failure",
    }
    runs: list[RunInfo] = []
    ticks: list[float] = []
    with DagsterInstance.from_config(str(home)) as instance:
        tick_of: dict[str, float] = {}
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id):
                ticks.append(tick.timestamp)
                for run_id in tick.run_ids:
                    tick_of[run_id] = tick.timestamp
        for record in instance.get_run_records():
            run = record.dagster_run
            partition = run.tags.get(PARTITION_TAG) or run.tags.get("dagster/partition") or ""
            lsn_range = parse_partition(partition) if partition else None
            info = RunInfo(
                run.run_id,
                partition,
                int(lsn_range.lo) if lsn_range else None,
                int(lsn_range.hi) if lsn_range else None,
                utc_timestamp(record.create_timestamp),
                run.status.value,
                tick=tick_of.get(run.run_id),
            )
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                if event is None:
                    continue
                kind = event.event_type_value
                if kind in wanted:
                    info.events.setdefault(wanted[kind], entry.timestamp)
                elif kind == DagsterEventType.ENGINE_EVENT.value and (
                    event.message or ""
                ).startswith("Started process for run"):
                    info.events.setdefault("process", entry.timestamp)
                elif kind == DagsterEventType.STEP_START.value:
                    info.steps[event.step_key or "?"] = (entry.timestamp, None)
                elif kind == DagsterEventType.STEP_SUCCESS.value and event.step_key in info.steps:
                    info.steps[event.step_key] = (info.steps[event.step_key][0], entry.timestamp)
                elif kind == DagsterEventType.ASSET_MATERIALIZATION.value:
                    metadata = event.event_specific_data.materialization.metadata
                    if "mirror_lsn" in metadata:
                        lsn = int(Lsn.parse(str(metadata["mirror_lsn"].value)))
                        key = event.asset_key.to_user_string()
                        info.mirrors.append((entry.timestamp, key, lsn))
            runs.append(info)
    ticks = sorted(t for t in ticks if t >= since)
    return sorted(runs, key=lambda r: r.created), ticks


def attach_spark(runs: list[RunInfo], events: Path) -> None:
    """Each run's Spark application from Spark's event log: the SparkContext's start, and per
    job its submission and completion (ms → s)."""
    apps = []
    for path in events.iterdir():
        app: dict[str, Any] = {"jobs": {}}
        queries: dict[int, str] = {}
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        text = "\n".join(
            f.read_text(errors="replace")
            for f in files
            if f.name.startswith(("app-", "local-", "events_"))
        )
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            name = event.get("Event")
            if name == "SparkListenerApplicationStart":
                app["start"] = event["Timestamp"] / 1000
            elif name == "SparkListenerApplicationEnd":
                app["end"] = event["Timestamp"] / 1000
            elif name.endswith("SparkListenerSQLExecutionStart"):
                queries[event["executionId"]] = short_site(event.get("description", "?"))
                app.setdefault("queries", []).append(event["time"] / 1000)
            elif name == "SparkListenerJobStart":
                query = (event.get("Properties") or {}).get("spark.sql.execution.id")
                stages = event.get("Stage Infos") or [{}]
                label = (
                    f"in SQL execution '{queries.get(int(query), '?')}'"
                    if query is not None
                    else f"outside SQL executions: '{short_site(stages[0].get('Stage Name', '?'))}'"
                )
                app["jobs"][event["Job ID"]] = [event["Submission Time"] / 1000, None, label]
            elif name == "SparkListenerJobEnd" and event["Job ID"] in app["jobs"]:
                app["jobs"][event["Job ID"]][1] = event["Completion Time"] / 1000
        if "start" in app:
            apps.append(app)
    for run in runs:
        begin = run.events.get("started")
        end = run.events.get("success") or run.events.get("failure")
        if begin is None or end is None:
            continue
        for app in sorted(apps, key=lambda a: a["start"]):
            if app["start"] <= end and app.get("end", math.inf) >= begin:
                jobs = {k: j for k, j in app["jobs"].items() if begin <= j[0] <= end}
                queries = [t for t in app.get("queries", []) if begin <= t <= end]
                run.spark_app = {**app, "jobs": jobs, "queries": queries}


def short_site(text: str) -> str:
    """``collect at /x/y/change_log.py:113`` → ``collect at change_log.py:113``."""
    head, _, where = text.partition(" at ")
    return f"{head} at {where.rsplit('/', 1)[-1]}" if where else head


def assign_visibility(commits: list[Commit], runs: list[RunInfo], source: Source) -> None:
    by_table: dict[str, list[tuple[float, int, str]]] = {}
    names = {t.mirror_key.to_user_string(): t.instance.name for t in source.tables}
    for run in runs:
        for when, key, lsn in run.mirrors:
            by_table.setdefault(names.get(key, key), []).append((when, lsn, run.run_id))
    index: dict[str, tuple[list[int], list[tuple[float, str]]]] = {}
    for name, items in by_table.items():
        items.sort()
        # the first time the mirror reached each LSN: running maximum over time
        lsns, firsts, highest = [], [], -1
        for when, lsn, run_id in items:
            if lsn > highest:
                lsns.append(lsn)
                firsts.append((when, run_id))
                highest = lsn
        index[name] = (lsns, firsts)
    for commit in commits:
        seen = []
        for name in commit.tables:
            lsns, firsts = index.get(name, ([], []))
            position = bisect.bisect_left(lsns, commit.lsn)
            if position == len(lsns):
                seen = []
                break
            seen.append(firsts[position])
        if seen:
            commit.visible, commit.run_id = max(seen)


# -- reporting -------------------------------------------------------------------------------

COMPONENTS = [
    ("capture: last commit of the range → max LSN", "capture"),
    ("sensor: captured → the tick that asks for the run", "sensor_wait"),
    ("tick start → run created", "tick"),
    ("run created → RUN_ENQUEUED (planned-event writes)", "submit"),
    ("run queue: RUN_ENQUEUED → RUN_STARTING", "queue"),
    ("launch: RUN_STARTING → run process started", "spawn"),
    ("process started → RUN_START (code location load)", "code_load"),
    ("RUN_START → change-log STEP_START", "setup"),
    ("Spark start: step start → SparkContext started", "spark_context"),
    ("SparkContext started → first SQL query (read planning)", "spark_first_query"),
    ("first SQL query → its first Spark job", "spark_first_job"),
    ("change-log step, after the first Spark job", "change_log_rest"),
    ("between the steps", "between"),
    ("mirror step, to the last mirror materialization", "mirror"),
    ("= last commit of the range → visible", "total"),
    ("sensor delay (last commit → run created)", "sensor_delay"),
    ("queue + launch (run created → RUN_START)", "queue_launch"),
    ("change-log step (whole)", "change_log_step"),
    ("mirror step (whole)", "mirror_step"),
    ("run: created → RUN_SUCCESS", "run_total"),
    ("Spark jobs per run: change-log step (count)", "jobs_change_log"),
    ("Spark jobs per run: mirror step (count)", "jobs_mirror"),
    ("Spark jobs per run: change-log step (summed job seconds)", "job_seconds_change_log"),
    ("Spark jobs per run: mirror step (summed job seconds)", "job_seconds_mirror"),
]


def breakdown(result: dict) -> list[dict[str, float]]:
    commits: list[Commit] = result["commits"]
    rows = []
    runs = [r for r in result["runs"] if r.hi is not None and r.status == "SUCCESS"]
    for run in runs:
        if run.created < result["workload_started"]:
            continue
        inside = [c for c in commits if run.lo < c.lsn <= run.hi and c.captured is not None]
        steps = sorted(run.steps.items(), key=lambda s: s[1][0])
        change_log = next((v for k, v in steps if "change_logs" in k), None)
        mirror = next((v for k, v in steps if "mirrors" in k), None)
        if not inside or change_log is None or mirror is None or not run.mirrors:
            continue
        last = max(inside, key=lambda c: c.committed)
        visible = max(when for when, _, _ in run.mirrors)
        e = run.events
        tick = run.tick if run.tick is not None else run.created
        row = {
            "capture": last.captured - last.committed,
            "sensor_wait": tick - last.captured,
            "tick": run.created - tick,
            "submit": e.get("enqueued", math.nan) - run.created,
            "queue": e.get("starting", math.nan) - e.get("enqueued", math.nan),
            "spawn": e.get("process", math.nan) - e.get("starting", math.nan),
            "code_load": e["started"] - e.get("process", math.nan),
            "queue_launch": e["started"] - run.created,
            "setup": change_log[0] - e["started"],
            "between": mirror[0] - (change_log[1] or mirror[0]),
            "mirror": visible - mirror[0],
            "total": visible - last.committed,
            "sensor_delay": run.created - last.committed,
            "change_log_step": (change_log[1] or math.nan) - change_log[0],
            "mirror_step": (mirror[1] or math.nan) - mirror[0],
            "run_total": e["success"] - run.created,
        }
        app = run.spark_app
        if app is not None and app["jobs"]:
            first_job = min(job[0] for job in app["jobs"].values())
            # 0 when the session was up before the step (the in-process variant)
            row["spark_context"] = max(0.0, app["start"] - change_log[0])
            first_query = min(app["queries"] or [first_job])
            row["spark_first_query"] = first_query - max(app["start"], change_log[0])
            row["spark_first_job"] = first_job - first_query
            row["change_log_rest"] = (change_log[1] or math.nan) - first_job
            for key, (begin, end) in (("jobs_change_log", change_log), ("jobs_mirror", mirror)):
                jobs = [j for j in app["jobs"].values() if begin <= j[0] <= (end or begin)]
                row[key] = len(jobs)
                row[key.replace("jobs", "job_seconds")] = sum((j[1] or j[0]) - j[0] for j in jobs)
        else:
            row["change_log_rest"] = (change_log[1] or math.nan) - change_log[0]
        rows.append(row)
    return rows


def spark_job_sites(result: dict) -> list[tuple[str, int, float]]:
    """Spark jobs of the range runs grouped by call site: (site, jobs, summed seconds)."""
    groups: dict[str, list[float]] = {}
    for run in result["runs"]:
        if run.hi is None or run.spark_app is None or run.created < result["workload_started"]:
            continue
        for start, end, site in run.spark_app["jobs"].values():
            groups.setdefault(site, []).append((end or start) - start)
    return sorted(((site, len(v), sum(v)) for site, v in groups.items()), key=lambda item: -item[2])


def report_variant(result: dict) -> dict[str, float]:
    variant: Variant = result["variant"]
    commits: list[Commit] = result["commits"]
    print(f"\nvariant {variant.name}: {variant.describe()}")
    setup = ", ".join(f"{k} {v:.1f} s" for k, v in result["setup"].items())
    print(f"  setup: {setup}")
    print(f"  workload: {result['workload_summary'].splitlines()[-1].strip()}")
    captured = [c.captured - c.committed for c in commits if c.captured is not None]
    visible = [c for c in commits if c.visible is not None]
    fresh = [c.visible - c.committed for c in visible]
    lost = len(commits) - len(visible)
    print(
        f"  {len(commits)} committed transactions; visible in the mirror: {len(visible)}"
        f"{f' ({lost} never, within the drain timeout)' if lost else ''}; mirrors caught up "
        f"{result['drain']:.1f} s after the workload ended"
    )
    print(f"  {'seconds (per committed transaction)':<48} {'p50':>7} {'p95':>7} {'max':>7}")
    ordered = sorted(result["runs"], key=lambda r: r.created)
    previous_end: dict[str, float | None] = {}
    for before, run in zip([None, *ordered], ordered, strict=False):
        ended = before and (before.events.get("success") or before.events.get("failure"))
        previous_end[run.run_id] = ended or None
    ticks_of = {r.run_id: (r.tick if r.tick is not None else r.created) for r in result["runs"]}
    waits, loops, owns = [], [], []
    for c in visible:
        tick = ticks_of[c.run_id]
        ready = c.captured if c.captured is not None else c.committed
        freed = min(max(ready, previous_end[c.run_id] or ready), tick)
        waits.append(freed - ready)
        loops.append(tick - freed)
        owns.append(c.visible - tick)
    lines = [
        ("capture latency: commit → max LSN", captured),
        ("freshness: commit → visible in the mirror", fresh),
        ("  = capture latency", captured),
        ("  + waiting for the run in flight to end", waits),
        ("  + then until the tick that asks for its run", loops),
        ("  + that tick → visible (its own run)", owns),
    ]
    for label, values in lines:
        print(
            f"  {label:<48} {fmt(percentile(values, 0.5))} {fmt(percentile(values, 0.95))} "
            f"{fmt(max(values) if values else math.nan)}"
        )
    p50_target = percentile(captured, 0.5) + TARGET_SLACK
    p95_target = percentile(captured, 0.95) + TARGET_SLACK
    within = sum(
        1
        for c in visible
        if c.captured is not None and c.visible - c.committed <= c.captured - c.committed + 10
    )
    p50, p95 = percentile(fresh, 0.5), percentile(fresh, 0.95)
    print(
        f"  target capture latency + {TARGET_SLACK:.0f} s: p50 {p50_target:.2f} s, p95 "
        f"{p95_target:.2f} s; freshness/target: p50 {p50 / p50_target:.2f}, p95 "
        f"{p95 / p95_target:.2f} ({'met' if p95 <= p95_target else 'MISSED'}); commits within "
        f"their own capture latency + {TARGET_SLACK:.0f} s: {within}/{len(commits)} "
        f"({100 * within / max(1, len(commits)):.0f}%)"
    )
    rows = breakdown(result)
    ranges = [
        r for r in result["runs"] if r.hi is not None and r.created >= result["workload_started"]
    ]
    created = [r.created for r in ranges]
    cycles = [b - a for a, b in itertools.pairwise(created)]
    spacing = [b - a for a, b in itertools.pairwise(result["ticks"])]
    statuses: dict[str, int] = {}
    for r in ranges:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    print(
        f"  {len(ranges)} range runs during the workload ({', '.join(f'{n} {s}' for s, n in statuses.items())}); "  # noqa: E501
        f"one run every {fmt(percentile(cycles, 0.5), 0)} s (p50, created → next created); "
        + (
            f"sensor ticks every {fmt(percentile(spacing, 0.5), 0)} s p50, "
            f"{fmt(percentile(spacing, 0.95), 0)} s p95"
            if spacing
            else "no sensor daemon"
        )
    )
    print(f"  where the time goes, per range run ({len(rows)} runs), seconds:")
    print(f"    {'component':<56} {'p50':>7} {'p95':>7} {'max':>7}")
    summary = {"p50": p50, "p95": p95, "capture_p50": percentile(captured, 0.5)}
    for label, key in COMPONENTS:
        values = [r[key] for r in rows if key in r and not math.isnan(r[key])]
        top = max(values) if values else math.nan
        print(
            f"    {label:<56} {fmt(percentile(values, 0.5))} {fmt(percentile(values, 0.95))} "
            f"{fmt(top)}"
        )
        summary[key] = percentile(values, 0.5)
    sites = spark_job_sites(result)
    if sites:
        print("  Spark jobs of the range runs by call site (jobs, summed seconds):")
        for site, count, seconds in sites[:10]:
            print(f"    {count:4d} jobs {seconds:7.1f} s  {site}")
    if result["killed"]:
        print(f"  stopping dagster dev needed TERM/KILL for: {result['killed']}")
    if result["leftover"]:
        print(f"  LEFT RUNNING after stop: {result['leftover']}")
    if result["sampler"]["errors"]:
        print(f"  max-LSN sampler errors: {result['sampler']['errors']}")
    one, five, fifteen = result["load"]
    print(f"  load average at the end of the variant: {one:.2f} {five:.2f} {fifteen:.2f}")
    return summary


# -- start-up probes (fresh processes) --------------------------------------------------------

SPARK_PROBE = """
import json, sys, time
t0 = time.perf_counter()
from cdc_assets.spark.session import build_spark_session
t1 = time.perf_counter()
conf = json.loads(sys.argv[1])
spark = build_spark_session(master="local[2]", app_name="freshness_probe", conf=conf)
t2 = time.perf_counter()
spark.range(1).count()
t3 = time.perf_counter()
bean = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({"import": t1 - t0, "session": t2 - t1, "first_job": t3 - t2,
                  "options": [a for a in bean.getInputArguments() if a.startswith("-XX")]}))
spark.stop()
"""

LOAD_PROBE = """
import json, time
t0 = time.perf_counter()
import dagster
t1 = time.perf_counter()
import cdc_assets.definitions as module
t2 = time.perf_counter()
defs = module.defs() if callable(module.defs) else module.defs
repo = defs.get_repository_def()
repo.get_job("demo_sync")
t3 = time.perf_counter()
print(json.dumps({"import dagster": t1 - t0, "import cdc_assets.definitions": t2 - t1,
                  "build definitions and the job": t3 - t2}))
"""

# argv: the server's URL, and directories to append to sys.path for pyspark[connect]'s packages
# ("-": none), appended so that the venv's own packages win (as in _common).
CONNECT_PROBE = """
import json, os, sys, time
if sys.argv[2] != "-":
    sys.path.extend(sys.argv[2].split(os.pathsep))
t0 = time.perf_counter()
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
t1 = time.perf_counter()
spark.range(10).count()
t2 = time.perf_counter()
print(json.dumps({"session": t1 - t0, "first_job": t2 - t1}))
"""


def run_probe(code: str, *argv: str, env: dict[str, str] | None = None) -> tuple[dict, float]:
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=env or child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    wall = time.perf_counter() - started
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"probe failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(lines[-1]), wall


def spark_conf(java: str = "") -> dict[str, str]:
    conf = dict(_common.SPARK_CONF)
    if java:
        conf["spark.driver.extraJavaOptions"] = java
    return conf


def record_cds_archive(path: Path) -> float:
    """A class-data-sharing archive of the classes a Spark start loads (JVM exit dumps it)."""
    started = time.perf_counter()
    run_probe(SPARK_PROBE, json.dumps(spark_conf(f"-XX:ArchiveClassesAtExit={path}")))
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    return time.perf_counter() - started


def spark_start_probes(cds: Path, repeat: int) -> list[tuple[str, list[float], list[dict]]]:
    candidates = [
        ("default (project settings, no JVM options)", ""),
        (f"client JIT + serial GC ({FAST_JIT})", FAST_JIT),
        ("class-data-sharing archive (-XX:SharedArchiveFile)", f"-XX:SharedArchiveFile={cds}"),
        ("both", f"{FAST_JIT} -XX:SharedArchiveFile={cds}"),
    ]
    results: dict[str, tuple[list[float], list[dict]]] = {name: ([], []) for name, _ in candidates}
    for _ in range(repeat):  # interleaved, so load changes hit every candidate alike
        for name, java in candidates:
            data, wall = run_probe(SPARK_PROBE, json.dumps(spark_conf(java)))
            results[name][0].append(wall)
            results[name][1].append(data)
    return [(name, *results[name]) for name, _ in candidates]


# Importing pyspark.sql.connect from ``python -c`` takes the doctest path: it exits 0 when packages
# are missing. So: are the packages there (their versions are checked when the probe connects)?
CONNECT_DEPS_CHECK = """
import importlib.util, os, sys
if sys.argv[1] != "-":
    sys.path.extend(sys.argv[1].split(os.pathsep))
names = ["pandas", "numpy", "pyarrow", "grpc", "grpc_status", "google.rpc", "zstandard"]
missing = [n for n in names if importlib.util.find_spec(n) is None]
sys.exit(1 if missing else 0)
"""


def connect_deps(extra: str | None) -> str | None:
    """Where the Python packages of ``pyspark[connect]`` are importable from ("-": the venv)."""
    for candidate in ("-", extra or str(_common.DEPS)):
        ok = subprocess.run(
            [sys.executable, "-c", CONNECT_DEPS_CHECK, candidate],
            env=child_env(),
            capture_output=True,
            check=False,
        )
        if ok.returncode == 0:
            return candidate
    return None


def connect_probe(workdir: Path, deps: str, repeat: int) -> dict[str, Any]:
    import pyspark

    home = Path(pyspark.__file__).parent
    port = free_port()
    env = child_env(SPARK_HOME=str(home))
    started = time.perf_counter()
    server = Group(
        [
            str(home / "bin" / "spark-submit"),
            "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master",
            "local[2]",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            f"spark.connect.grpc.binding.port={port}",
            *[f"--conf={k}={v}" for k, v in session_conf(_common.SPARK_CONF).items()],
        ],
        workdir / "spark-connect.log",
        env,
        workdir,
    )
    out: dict[str, Any] = {}
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for("the Spark Connect server", listening, 180, server)
        out["server_start"] = time.perf_counter() - started
        url = f"sc://127.0.0.1:{port}"
        out["clients"] = [run_probe(CONNECT_PROBE, url, deps, env=env) for _ in range(repeat + 1)]
    finally:
        out["killed"] = server.stop(20, signal.SIGTERM)
    return out


def probes(workdir: Path, cds: Path, repeat: int, extra_deps: str | None) -> None:
    print(f"\nstart-up in fresh processes (median of {repeat}; seconds):")
    print(
        f"  {'Spark start: build_spark_session + range(1).count()':<66} "
        f"{'process':>8} {'session':>8} {'1st job':>8}  vs default"
    )
    base = None
    for name, walls, data in spark_start_probes(cds, repeat):
        wall = statistics.median(walls)
        base = base or wall
        session = statistics.median(d["session"] for d in data)
        first = statistics.median(d["first_job"] for d in data)
        print(f"  {name:<66} {wall:8.2f} {session:8.2f} {first:8.2f}  {wall / base:.2f}x")
    loads = [
        run_probe(LOAD_PROBE, env=child_env(CDC_ASSETS_CONFIG=str(workdir / "cdc_assets.yaml")))[0]
        for _ in range(repeat)
    ]
    parts = ", ".join(f"{k} {statistics.median(d[k] for d in loads):.2f}" for k in loads[0])
    print(f"  code location load (what a run worker does before RUN_START): {parts}")
    deps = connect_deps(extra_deps)
    if deps is None:
        print(
            "  Spark Connect: skipped, the Python packages of pyspark[connect] are missing "
            "(pandas, numpy, pyarrow, grpcio, grpcio-status, googleapis-common-protos, zstandard; "
            "`make bench` puts them in .venv/bench-deps)"
        )
        return
    try:
        found = connect_probe(workdir, deps, repeat)
    except (RuntimeError, SystemExit) as exc:
        print(f"  Spark Connect: failed: {str(exc)[-600:]}")
        return
    clients = found["clients"]
    print(
        f"  Spark Connect server (spark-connect jar of the pyspark wheel), started once: "
        f"{found['server_start']:.2f} s; a client process's session + first job: first client "
        f"{clients[0][0]['session']:.2f} + {clients[0][0]['first_job']:.2f} s, then median "
        f"{statistics.median(c[0]['session'] for c in clients[1:]):.2f} + "
        f"{statistics.median(c[0]['first_job'] for c in clients[1:]):.2f} s "
        f"(process {statistics.median(c[1] for c in clients[1:]):.2f} s)"
    )


# -- main ------------------------------------------------------------------------------------


def compare(summaries: dict[str, dict[str, float]]) -> None:
    """Each variant's figures side by side, and each one's ratio to ``default``."""
    if len(summaries) < 2 or "default" not in summaries:
        return
    print("\nvariants against default (seconds; components: p50 over the range runs):")
    d = summaries["default"]
    others = [n for n in summaries if n != "default"]
    keys = [("freshness p50", "p50"), ("freshness p95", "p95")] + [
        (label.strip(), key) for label, key in COMPONENTS if key in d
    ]
    print(
        f"  {'':<56} "
        + " ".join(f"{n[:10]:>10}" for n in summaries)
        + "".join(f" {('/' + n)[:10]:>10}" for n in others)
    )
    for label, key in keys:
        values = [summaries[n].get(key, math.nan) for n in summaries]
        ratios = [
            d[key] / summaries[n].get(key, math.nan) if summaries[n].get(key) else math.nan
            for n in others
        ]
        print(
            f"  {label[:56]:<56} "
            + " ".join(fmt(v, 10) for v in values)
            + "".join(f" {fmt(r, 10)}" for r in ratios)
        )
    print("  (/x: default's figure divided by x's, so > 1 means x is faster)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="workload seconds (300)")
    parser.add_argument("--quick", action="store_true", help="60 s of workload, fewer repeats")
    parser.add_argument("--tps", type=float, default=5.0, help="transactions per second (5)")
    parser.add_argument("--rows", type=int, default=1000, help="initial rows per table (1000)")
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS)} (all)",
    )
    parser.add_argument("--setup-timeout", type=float, default=600.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the files (logs, storage)")
    parser.add_argument(
        "--connect-deps",
        help="where pyspark[connect]'s Python packages are (paths joined by ':'; default: "
        ".venv/bench-deps, where `make bench` installs them)",
    )
    parser.add_argument(
        "--reanalyze", type=Path, help="only report again on the variants kept in this --keep dir"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 60.0)
    repeat = 2 if args.quick else 3
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(VARIANTS)}")
    print(machine_line())
    print(
        f"freshness: dagster dev with source '{SOURCE}' (5 demo tables, {args.rows} rows each), "
        f"workload {args.tps:g} tx/s for {args.seconds:g} s per variant; target: commit → "
        f"visible <= capture latency + {TARGET_SLACK:.0f} s"
    )
    if args.reanalyze is not None:
        summaries = {
            name: report_variant(
                analyze(
                    args.reanalyze / name,
                    json.loads((args.reanalyze / name / "meta.json").read_text()),
                )
            )
            for name in names
            if (args.reanalyze / name / "meta.json").exists()
        }
        compare(summaries)
        print(machine_line())
        return 0
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            base = args.keep
        else:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc_fresh_")))
        cds = base / "spark-classes.jsa"
        needs_cds = any("{cds}" in VARIANTS[n].java_options for n in names)
        if needs_cds:
            seconds = record_cds_archive(cds)
            size = cds.stat().st_size / 2**20 if cds.exists() else 0
            print(
                f"class-data-sharing archive of a Spark start recorded in {seconds:.1f} s "
                f"({size:.0f} MiB)"
            )
        summaries = {}
        last_workdir = None
        for name in names:
            workdir = base / name
            if workdir.exists():
                shutil.rmtree(workdir)
            workdir.mkdir()
            meta = run_variant(args, VARIANTS[name], workdir, cds)
            summaries[name] = report_variant(analyze(workdir, meta))
            last_workdir = workdir
        compare(summaries)
        if last_workdir is not None:
            if not cds.exists():
                record_cds_archive(cds)
            probes(last_workdir, cds, repeat, args.connect_deps)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
