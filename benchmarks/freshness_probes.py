"""The freshness benchmark's start-up probes (see :mod:`freshness`), each in a fresh process:
Spark's start with each JVM option, the code location's load, and a Spark Connect session."""

from __future__ import annotations

import json
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common
from freshness_run import FAST_JIT, child_env, wait_for

from cdc_assets.process_group import ProcessGroup
from cdc_assets.spark.session import session_conf
from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parent.parent
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
# ("-": none), appended so that the venv's own packages win.
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
    for candidate in ("-", *([extra] if extra else [])):
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
    server = ProcessGroup(
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
            "(pandas, numpy, pyarrow, grpcio, grpcio-status, googleapis-common-protos, zstandard: "
            "dependencies of the project; run `make setup`)"
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
