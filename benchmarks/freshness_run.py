"""The freshness benchmark's runs (see :mod:`freshness`): per variant a fresh emulated source,
a project config and a ``DAGSTER_HOME``, then ``dagster dev`` (the tests' helper,
:mod:`cdc_assets_tests.support.dagster_dev`) or the in-process stand-in, the workload, and the
wait until the mirrors hold the last commit; what it saw goes to the variant's ``meta.json``."""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common
import yaml

from cdc_assets import emulator
from cdc_assets.config import load_config
from cdc_assets.dagster.sync.source import Source, load_source
from cdc_assets.dagster.sync.sync_state import SourceSync, mirror_at
from cdc_assets.dagster.warm_launcher import DAGSTER_YAML as WARM_LAUNCHER
from cdc_assets.process_group import ProcessGroup
from cdc_assets.spark import connect_server
from cdc_assets.spark.mirror_versions import position_of
from cdc_assets.sqlserver import find_max_lsn, last_transaction_lsn
from cdc_assets_tests.support.dagster_dev import dagster_dev_command, server_answers
from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parent.parent
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
    spark_connect: bool = False  # the runs attach to a Spark Connect server, as under make demo
    warm_launcher: bool = False  # runs start in a spare run worker (make demo's run launcher)
    histories: bool = False  # a history (SCD type 2) on every table

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
        spark = (
            "runs attach to a Spark Connect server (spark.remote, as make demo sets it)"
            if self.spark_connect
            else f"a Spark driver per run, driver JVM options: {java}"
        )
        launcher = ", runs launched into warm run workers" if self.warm_launcher else ""
        histories = ", a history on every table" if self.histories else ""
        return (
            f"sensor_interval_seconds {self.sensor_interval}, {queue}, {spark}{launcher}{histories}"
        )


VARIANTS = {
    "default": Variant("default", 5, None, ""),
    "tuned": Variant("tuned", 1, 1, f"{FAST_JIT} -XX:SharedArchiveFile={{cds}}"),
    "in-process": Variant("in-process", 1, None, "", in_process=True),
    # what make demo runs: cdc_assets.yaml's sensor interval and spark.remote, scripts/demo.sh's
    # run queue and run launcher
    "demo": Variant("demo", 2, 1, "", spark_connect=True, warm_launcher=True),
    # the same with a history on every table: what each range run's history step costs, and
    # whether the next run's change-log step waits for it (not in the default variants)
    "demo-histories": Variant(
        "demo-histories", 2, 1, "", spark_connect=True, warm_launcher=True, histories=True
    ),
}


IDLE_SLEEP = 0.2


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.update(extra)
    return env


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
    what: str, check: Callable[[], bool], timeout: float, alive: ProcessGroup | InProcess
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
        from cdc_assets.dagster.sync.names import sync_job_name

        self.source = source
        self.defs = build_definitions(load_config(config_path), [source])
        self.job = self.defs.resolve_job_def(sync_job_name(source.name))
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        self.instance = DagsterInstance.from_config(str(home))
        self.proc = self  # ``poll()`` for wait_for's liveness check
        self.failed = 0
        self.quiet = False

    def poll(self) -> None:
        return None

    def tick(self) -> bool:
        from cdc_assets.dagster.demo.in_process import sync_step

        _tick, result = sync_step(self.job, self.instance, self.source)
        if result is None:
            return False
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


def mirror_lsns(source: Source) -> list[int | None]:
    """Where each mirror is, as the sync reads it: its last commit's LSN moved on by the quiet
    ranges the sync state recorded after that commit (a range that left a table quiet commits
    nothing to its mirror)."""
    state = SourceSync.load(source, fill=False)
    found = []
    for table in source.tables:
        committed = position_of(source.store.properties(table.mirror_key.path, None))
        at, _moved = mirror_at(committed, state.tables.get(table))
        found.append(int(at) if at is not None else None)
    return found


def spark_event_log(workdir: Path) -> dict[str, str]:
    """Spark's event log on, into ``workdir/spark-events`` (the breakdown reads it)."""
    events = workdir / "spark-events"
    events.mkdir(exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def write_setup(
    workdir: Path, variant: Variant, cds: Path | None, remote: str | None = None
) -> tuple[Path, Path, Path]:
    db = workdir / "source.db"
    conf = spark_event_log(workdir)
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
                **({"history": {"include": ["*"]}} if variant.histories else {}),
            }
        ],
        "storage": {"base_path": str(workdir / "storage")},
        "spark": {"master": "local[2]", "conf": conf},
    }
    if remote is not None:  # the server has the event log on: the runs' jobs are its own
        config["spark"] = {"remote": remote}
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
    if variant.warm_launcher:
        extra += "\n" + WARM_LAUNCHER.rstrip("\n")
    text = DAGSTER_YAML.format(extra=extra)
    (home / "dagster.yaml").write_text(text)
    return db, config_path, home


def run_variant(
    args: argparse.Namespace,
    variant: Variant,
    workdir: Path,
    cds: Path | None,
    beside: Callable[[Path], contextlib.AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    """Sets up, runs and stops one variant; what it measured on the way (``meta.json``).
    ``beside(source.db)``: what else reads the source, entered once every mirror exists and
    left after the mirrors reached the last commit (benchmarks/debezium_peer.py: Debezium)."""
    meta: dict[str, Any] = {"variant": variant.name, "setup": {}}
    server = None
    remote = None
    if variant.spark_connect:  # started as make demo starts it, before dagster dev
        began = time.monotonic()
        spark_port = free_port()
        server = connect_server.start(
            port=spark_port,
            master="local[2]",
            conf=spark_event_log(workdir),
            storage_path=str(workdir / "storage"),
            log=workdir / "spark-connect.log",
        )
        remote = f"sc://127.0.0.1:{spark_port}"
        meta["setup"]["Spark Connect server listens"] = time.monotonic() - began
    try:
        return _run_variant(args, variant, workdir, cds, remote, meta, beside)
    finally:
        if server is not None:
            connect_server.stop(server)


def _run_variant(
    args: argparse.Namespace,
    variant: Variant,
    workdir: Path,
    cds: Path | None,
    remote: str | None,
    meta: dict[str, Any],
    beside: Callable[[Path], contextlib.AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    db, config_path, home = write_setup(workdir, variant, cds, remote)
    env = child_env(CDC_ASSETS_CONFIG=str(config_path), DAGSTER_HOME=str(home))
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
        dagster: ProcessGroup | InProcess = InProcess(config_path, home, source)
    else:
        port = free_port()
        dagster = ProcessGroup(
            dagster_dev_command(port),
            workdir / "dagster-dev.log",
            env,
            ROOT,
        )
    workload: ProcessGroup | None = None
    try:
        with LsnSampler(db) as sampler, contextlib.ExitStack() as peers:
            if isinstance(dagster, ProcessGroup):
                meta["setup"]["dagster dev: UI answers"] = wait_for(
                    "the Dagster UI",
                    lambda: server_answers(f"http://127.0.0.1:{port}"),
                    300,
                    dagster,
                )
            meta["setup"]["then: every mirror exists (snapshot run, first range)"] = wait_for(
                "the first mirrors",
                lambda: all(x is not None for x in mirror_lsns(source)),
                args.setup_timeout,
                dagster,
            )
            if beside is not None:
                began = time.monotonic()
                peers.enter_context(beside(db))
                meta["setup"]["then: the peer reader is ready"] = time.monotonic() - began
            agent.stop()
            meta["baseline_lsn"] = sampler.highest
            meta["workload_started"] = time.time()
            workload = ProcessGroup(
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


def last_commit_lsn(db: Path) -> int:
    conn = emulator.connect(db, autocommit=True)
    try:
        last = last_transaction_lsn(conn)
        return int(last) if last is not None else -1
    finally:
        conn.close()
