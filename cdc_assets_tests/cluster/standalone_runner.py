"""A sync on a standalone Spark cluster (used by ``test_spark_standalone``).

``python -m cdc_assets_tests.cluster.standalone_runner SPEC.json`` creates an emulated source in
the spec's ``work`` directory and builds the project's real definitions from a config whose
``spark.master`` is the spec's ``spark://`` URL. The Spark session is the one the Dagster
resource builds from that config (``spark_resource``: dagster-pyspark's lazy resource), started
once here and shared by the runs through ``getOrCreate``. Then, with the real sensor ticking on a
test instance: the ``snapshot`` run, a few workload transactions and a capture scan, the range
runs, and a comparison of every mirror with its source table.

Evidence that the reads ran on the cluster's executors, collected twice:

- *where the data source's ``read`` ran*: the project's ``cdc_sqlserver`` source is replaced (in
  this process only) by a subclass, pickled by value to the executors, whose ``read`` delegates
  to the real one and then writes one probe record: its process id, the rows it produced, the
  Spark task, and its process ancestry read from ``/proc`` — the Python worker's parents up to
  init, each with the JVM main class and, for an executor backend, its ``--executor-id`` and
  ``--app-id``. The test checks that every read descends from the worker JVM it started, through
  an executor of this application, and not from this (the driver's) process.
- *Spark's own accounting*: the driver's REST API (``/api/v1/applications/<id>/allexecutors``)
  with each executor's task counts, and the master's ``/json/`` entry for the application.

The process prints one line ``RESULT <json>`` on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceReader, InputPartition

from cdc_assets.spark import sqlserver_source
from cdc_assets_tests.support.jvm import FAST_JVM

STARTED = time.monotonic()
PROBE_SOURCE = "cdc_sqlserver_probe"
PHASE_OPTION = "probe.phase"
PROBE_DIR_OPTION = "probe.dir"
RESULT_PREFIX = "RESULT "
WORKLOAD_STEPS = 12
# Two tables keep the runs short: a composite key, a name that needs brackets, a parent link.
TABLES = ("orders", "order lines")
EXECUTOR_FIELDS = ("id", "hostPort", "isActive", "totalCores", "totalTasks", "completedTasks")


def _say(text: str) -> None:
    print(f"standalone runner [{time.monotonic() - STARTED:5.1f} s]: {text}", file=sys.stderr)


def _process(pid: int) -> dict[str, Any]:
    """One ancestor: its parent, command name and, for a Spark JVM, what it runs."""
    proc = Path("/proc", str(pid))
    stat = (proc / "stat").read_text()
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")".
    ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
    argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    entry: dict[str, Any] = {"pid": pid, "ppid": ppid, "exe": Path(argv[0]).name}
    spark_classes = [a for a in argv if a.startswith("org.apache.spark.")]
    if spark_classes:
        entry["main_class"] = spark_classes[0]
    for flag, key in (("--executor-id", "executor_id"), ("--app-id", "app_id")):
        if flag in argv[:-1]:
            entry[key] = argv[argv.index(flag) + 1]
    if entry["exe"].startswith("python"):
        entry["args"] = " ".join(argv[1:4])
    return entry


def ancestry() -> list[dict[str, Any]]:
    """This process and its ancestors up to init (runs in the Python worker)."""
    chain: list[dict[str, Any]] = []
    pid = os.getpid()
    while pid > 1 and len(chain) < 32:
        try:
            entry = _process(pid)
        except OSError:
            break
        chain.append(entry)
        pid = entry["ppid"]
    return chain


class ProbeReader(DataSourceReader):
    """The real reader's partitions and rows; each ``read`` leaves a probe record behind."""

    def __init__(self, real: DataSourceReader, phase: str, directory: str) -> None:
        self.real = real
        self.phase = phase
        self.directory = directory

    def partitions(self) -> Any:
        return self.real.partitions()

    def read(self, partition: InputPartition) -> Any:
        from pyspark import TaskContext

        rows = batches = 0
        started = time.time()
        try:
            for batch in self.real.read(partition):
                rows += batch.num_rows
                batches += 1
                yield batch
        finally:
            context = TaskContext.get()
            plan = self.real.plan  # type: ignore[attr-defined]
            record = {
                "phase": self.phase,
                "kind": "snapshot" if plan.lsn_range is None else "changes",
                "instance": plan.instance.name,
                "piece": getattr(partition, "index", None),
                "rows": rows,
                "batches": batches,
                "seconds": round(time.time() - started, 3),
                "pid": os.getpid(),
                "stage": context.stageId() if context else None,
                "task_attempt": context.taskAttemptId() if context else None,
                "ancestry": ancestry(),
            }
            name = f"{os.getpid()}-{time.time_ns()}.json"
            path = Path(self.directory, name)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(record))
            temporary.replace(path)


class ProbeSource(sqlserver_source.SqlServerDataSource):
    """``cdc_sqlserver`` with a :class:`ProbeReader` around its reader."""

    @classmethod
    def name(cls) -> str:
        return PROBE_SOURCE

    def reader(self, schema: Any) -> DataSourceReader:
        return ProbeReader(
            super().reader(schema), self.options[PHASE_OPTION], self.options[PROBE_DIR_OPTION]
        )


class Probe:
    """Routes every read of the project through :class:`ProbeSource`, tagged with a phase."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.phase = "setup"
        directory.mkdir(parents=True, exist_ok=True)

    def install(self) -> None:
        def load(spark: Any, plan: sqlserver_source.ReadPlan) -> Any:
            spark.dataSource.register(ProbeSource)
            return (
                spark.read.format(PROBE_SOURCE)
                .schema(sqlserver_source._spark_schema(plan.arrow_schema))
                .option(sqlserver_source.PAYLOAD_OPTION, plan.encode())
                .option(PHASE_OPTION, self.phase)
                .option(PROBE_DIR_OPTION, str(self.directory))
                .load()
            )

        sqlserver_source._load = load

    def records(self) -> list[dict[str, Any]]:
        found = [json.loads(p.read_text()) for p in sorted(self.directory.glob("*.json"))]
        return sorted(found, key=lambda r: (r["phase"], r["instance"], r["piece"] or 0))


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def wait_for_cluster(webui_port: int, timeout: float) -> str:
    """The master's ``spark://`` URL once it has a worker ALIVE (the test starts both)."""
    deadline = time.monotonic() + timeout
    state: Any = "no answer"
    while time.monotonic() < deadline:
        try:
            state = _get_json(f"http://127.0.0.1:{webui_port}/json/")
        except (OSError, ValueError) as exc:  # ValueError: a master still starting answers ""
            state = f"no answer: {exc!r}"
        else:
            if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                return str(state["url"])
        time.sleep(0.25)
    raise SystemExit(f"no worker ALIVE at the master after {timeout:.0f} s; last state: {state}")


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    work = Path(spec["work"])

    from dagster import instance_for_test

    from cdc_assets import emulator
    from cdc_assets.config import parse_config
    from cdc_assets.dagster.definitions_builder import build_definitions
    from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION
    from cdc_assets.dagster.sync.source import load_source
    from cdc_assets.workload import DEMO_TABLES, create_demo_database
    from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness

    db = work / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    workload = create_demo_database(
        conn,
        seed=spec.get("seed", 0),
        rows_per_table=40,
        tables=[t for t in DEMO_TABLES if t.name in TABLES],
        polling_interval=None,
    )
    emulator.scan(db)
    # Prepared while the cluster starts; a "master" in the spec (a negative control such as
    # local[2]) skips the cluster.
    master_url = spec.get("master") or wait_for_cluster(spec["master_webui_port"], 90)
    _say(f"master {master_url}")
    config = parse_config(
        {
            "sources": [
                {
                    "name": SOURCE,
                    "connection": {"emulator": {"path": str(db)}},
                    # Small key ranges: a snapshot is several tasks, spread over the executor's
                    # cores.
                    "snapshot": {"mode": "auto", "chunk_rows": 15},
                }
            ],
            "storage": {"base_path": str(work / "storage")},
            "spark": {
                "master": master_url,
                "conf": {
                    "spark.driver.host": "127.0.0.1",
                    "spark.driver.bindAddress": "127.0.0.1",
                    "spark.ui.enabled": "true",  # for the REST API's executor task counts
                    "spark.ui.port": str(spec["driver_ui_port"]),
                    "spark.ui.showConsoleProgress": "false",
                    "spark.executor.memory": "1g",
                    "spark.cores.max": "2",
                    "spark.sql.shuffle.partitions": "2",
                    "spark.default.parallelism": "2",
                    # Start-up bound on 2 busy cores: the client compiler alone and the serial
                    # collector start the JVMs in about half the time; nothing here is long
                    # enough to need the optimizing compiler.
                    "spark.driver.extraJavaOptions": FAST_JVM,
                    "spark.executor.extraJavaOptions": FAST_JVM,
                },
            },
        },
        base_dir=work,
        origin="standalone runner",
    )
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    probe = Probe(work / "probes")
    probe.install()
    # The cluster's path: every read, write and MERGE in Spark, as for tables above the size
    # that the driver reads and delta-rs writes and merges itself (the demo's tables are small).
    from cdc_assets.spark import change_log_store, driver_merges, driver_writes, mirror_store

    for module in (change_log_store, mirror_store, driver_writes, driver_merges):
        module.DRIVER_WRITE_ROWS = 0  # type: ignore[attr-defined]
    driver_merges.DRIVER_MERGE_ROWS = 0  # nor are deletion vectors written in the driver

    # The session the project's resource builds from the config; runs get it via getOrCreate.
    resource = (defs.resources or {})["pyspark"]
    spark = resource.spark_session
    spark.sparkContext.setLogLevel("ERROR")
    context = spark.sparkContext
    app_id = context.applicationId
    _say(f"session up: master {context.master}, application {app_id}, UI {context.uiWebUrl}")

    runs: dict[str, list[str]] = {}
    with instance_for_test() as instance:
        harness = SyncHarness(db, source, defs, instance, workload, spark)

        probe.phase = "snapshot"
        harness.sync(limit=3)
        runs["snapshot"] = [
            r.dagster_run.tags.get("dagster/partition", "") for r in harness.results
        ]
        _say(f"snapshot runs: {runs['snapshot']}")
        assert runs["snapshot"][:1] == [SNAPSHOT_PARTITION], f"first run: {runs['snapshot']}"

        for _ in range(WORKLOAD_STEPS):
            workload.step()
        harness.capture()
        probe.phase = "range"
        done = len(harness.results)
        harness.sync(limit=5)
        runs["range"] = [
            r.dagster_run.tags.get("dagster/partition", "") for r in harness.results[done:]
        ]
        _say(f"range runs: {runs['range']}")

        probe.phase = "verify"
        verified_lsn = harness.assert_mirrors_equal_source()
        _say(f"mirrors equal to the source at {verified_lsn}")
    _say("instance closed")

    executors = _get_json(f"{context.uiWebUrl}/api/v1/applications/{app_id}/allexecutors")
    try:
        master_json = _get_json(f"http://127.0.0.1:{spec['master_webui_port']}/json/")
    except OSError:
        master_json = {}
    apps = [a for a in master_json.get("activeapps", []) if a.get("id") == app_id]
    result = {
        "runner_pid": os.getpid(),
        "master": context.master,
        "app_id": app_id,
        "driver_ui": context.uiWebUrl,
        "tables": [t.instance.name for t in source.tables],
        "runs": runs,
        "verified_lsn": str(verified_lsn),
        "executors": [{key: e.get(key) for key in EXECUTOR_FIELDS} for e in executors],
        "master_app": {k: apps[0].get(k) for k in ("id", "name", "cores", "state")}
        if apps
        else None,
        "probes": probe.records(),
    }
    _say("evidence collected")
    spark.stop()
    _say("session stopped")
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    _say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
