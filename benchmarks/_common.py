"""Shared helpers of the benchmark scripts (not a benchmark itself).

Every script builds its own emulator database in a temporary directory, times the path through
the project against a baseline measured in the same run, and prints rows/s and ratios. The helpers
here: the machine's load, a wide mixed-type table filled fast (``COLUMNS``, ``wide_row``), a
project config and definitions for an emulator source, a shared local Spark session, the Spark
jobs and stages run since a mark (from Spark's status store), and cProfile of a callable.
"""

from __future__ import annotations

import cProfile
import datetime as dt
import io
import os
import pstats
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from cdc_assets import emulator
from cdc_assets.sqlserver import cdc_admin

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

T = TypeVar("T")
# The wide table: 7 mixed-type columns, key ``id`` (``source_read.py`` and most benchmarks).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint NOT NULL"),
    ("qty", "int NULL"),
    ("price", "decimal(18,4) NULL"),
    ("name", "nvarchar(50) NULL"),
    ("created", "datetime2(7) NULL"),
    ("active", "bit NULL"),
    ("payload", "varbinary(32) NULL"),
)
ROWS_PER_TRANSACTION = 50_000
PARAMS_PER_STATEMENT = 2_000  # SQL Server's limit is 2,100
BASE_TIME = dt.datetime(2024, 1, 1)
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
}


def machine_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"machine: {os.cpu_count()} cores, load average {one:.2f} {five:.2f} {fifteen:.2f}"


def rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}" if seconds > 0 else "-"


@contextmanager
def timed(into: dict[str, float], label: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        into[label] = time.perf_counter() - started


def wide_row(i: int) -> tuple[object, ...]:
    """Row ``i`` of the wide table (NULLs, decimals, non-ASCII text, binary of several sizes)."""
    return (
        i,
        None if i % 10 == 0 else i % 1000,
        Decimal(i * 7919 % 10**9).scaleb(-4),
        None if i % 13 == 0 else f"item {i} – naïve",
        BASE_TIME + dt.timedelta(seconds=i, microseconds=i % 1_000_000),
        i % 3 == 0,
        (i * 2654435761 % 2**64).to_bytes(8, "big") * (1 + i % 4),
    )


def column_list() -> str:
    return ", ".join(f"[{name}]" for name, _ in COLUMNS)


def create_tables(conn: Any, tables: Sequence[str], *, enable_cdc: bool = True) -> None:
    """``tables`` with the wide table's 7 mixed-type columns (key ``id``)."""
    cdc_admin.enable_database(conn)
    conn.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    body = ", ".join(f"[{name}] {decl}" for name, decl in COLUMNS)
    for table in tables:
        conn.execute(
            f"CREATE TABLE [dbo].[{table}] ({body}, CONSTRAINT [pk_{table}] PRIMARY KEY ([id]))"
        )
        if enable_cdc:
            enable_table(conn, table)


def enable_table(conn: Any, table: str) -> None:
    cdc_admin.enable_table(conn, "dbo", table, supports_net_changes=True)


def insert_rows(
    conn: Any,
    table: str,
    first: int,
    last: int,
    row: Callable[[int], tuple[object, ...]] = wide_row,
) -> None:
    """Rows ``first`` .. ``last - 1`` in multi-row INSERTs, 50,000 per transaction."""
    per_statement = PARAMS_PER_STATEMENT // len(COLUMNS)
    marks = "(" + ", ".join(["?"] * len(COLUMNS)) + ")"
    names = column_list()
    for start in range(first, last, ROWS_PER_TRANSACTION):
        end = min(last, start + ROWS_PER_TRANSACTION)
        conn.execute("BEGIN TRAN")
        for lo in range(start, end, per_statement):
            hi = min(end, lo + per_statement)
            params = [value for i in range(lo, hi) for value in row(i)]
            conn.execute(
                f"INSERT INTO [dbo].[{table}] ({names}) VALUES " + ", ".join([marks] * (hi - lo)),
                params,
            )
        conn.execute("COMMIT")


def capture(path: Path) -> None:
    while emulator.scan(path):
        pass


def build_wide_table(path: Path, rows: int, table: str = "bench") -> float:
    """One captured table of ``rows`` rows, loaded *before* CDC is enabled (so capture has no
    inserts to copy: only the snapshot holds them); returns the seconds it took."""
    started = time.perf_counter()
    conn = emulator.connect(path, autocommit=True)
    try:
        create_tables(conn, [table], enable_cdc=False)
        insert_rows(conn, table, 0, rows)
        enable_table(conn, table)
    finally:
        conn.close()
    capture(path)  # establishes the capture instance
    return time.perf_counter() - started


def project_config(
    workdir: Path,
    db: Path,
    *,
    name: str = "bench",
    chunk_rows: int = 250_000,
    max_transactions: int = 10_000,
) -> Any:
    from cdc_assets.config import parse_config

    return parse_config(
        {
            "sources": [
                {
                    "name": name,
                    "connection": {"emulator": {"path": str(db)}},
                    "sync": {"max_transactions_per_range": max_transactions},
                    "snapshot": {"mode": "exact", "chunk_rows": chunk_rows},
                }
            ],
            "storage": {"base_path": str(workdir / "storage")},
            "spark": {"master": "local[2]", "conf": SPARK_CONF},
        },
        base_dir=workdir,
        origin="benchmark config",
    )


def spark_session() -> tuple[Any, float]:
    """The local[2] session every measurement shares (started and warmed here), and its seconds."""
    from cdc_assets.spark.session import build_spark_session

    started = time.perf_counter()
    spark = build_spark_session(master="local[2]", app_name="cdc_assets_bench", conf=SPARK_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    spark.range(10).count()
    return spark, time.perf_counter() - started


def spark_job_ids(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def print_spark_jobs(spark: Any, before: set[int], title: str, *, detail: int = 12) -> None:
    """The Spark jobs run since ``before``: per stage its tasks, wall seconds (submission to
    completion) and executor run seconds; grouped by stage name when there are more than
    ``detail`` stages."""
    tracker = spark.sparkContext.statusTracker()
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = sorted(spark_job_ids(spark) - before)
    stages = []
    for job in jobs:
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            try:
                data = store.lastStageAttempt(stage)
            except Exception:
                continue
            if data.status().toString() == "SKIPPED":
                continue
            sub, comp = data.submissionTime(), data.completionTime()
            wall = (
                (comp.get().getTime() - sub.get().getTime()) / 1000
                if sub.isDefined() and comp.isDefined()
                else 0.0
            )
            name = data.name().split(" at /")[0].split(" at Native")[0][:60]
            stages.append((job, stage, data.numTasks(), wall, data.executorRunTime() / 1000, name))
    total = sum(s[3] for s in stages)
    print(
        f"{title}: {len(jobs)} Spark jobs, {len(stages)} stages, {total:.2f} s of stage wall time"
    )
    if len(stages) <= detail:
        for job, stage, tasks, wall, run, name in stages:
            print(
                f"  job {job:3d} stage {stage:3d}  {tasks:3d} tasks  {wall:6.2f} s wall  "
                f"{run:6.2f} s executor run  {name}"
            )
        return
    groups: dict[str, list[float]] = {}
    for _, _, tasks, wall, run, name in stages:
        g = groups.setdefault(name, [0, 0, 0.0, 0.0])
        g[0] += 1
        g[1] += tasks
        g[2] += wall
        g[3] += run
    for name, (count, tasks, wall, run) in sorted(groups.items(), key=lambda i: -i[1][2]):
        print(
            f"  {count:3d} stages {tasks:4d} tasks  {wall:6.2f} s wall  {run:6.2f} s executor "
            f"run  {name}"
        )


def profiled(fn: Callable[[], T], *, top: int = 25, sort: str = "cumulative") -> tuple[T, str]:
    """``fn()`` under cProfile; its result and the ``top`` lines of the driver's profile."""
    profile = cProfile.Profile()
    result = profile.runcall(fn)
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    text = out.getvalue()
    start = text.find("   ncalls")
    return result, (text[start:] if start >= 0 else text).rstrip()


def print_pipelines(
    spark: Any,
    rows: int,
    lines: Sequence[tuple[str, float]],
    cold: dict[str, Any],
    warm: dict[str, Any],
    baselines: Sequence[tuple[str, float, float]],
) -> None:
    """The comparison table of a project run (cold and warm) against its baselines: seconds and
    rows/s per pipeline, the ratios to each baseline ``(name, target, seconds)``, the Dagster
    steps and the Spark jobs of both project runs, and the machine's load."""
    width = max(len(label) for label, _ in lines)
    print(f"{'pipeline'.ljust(width)}  {'seconds':>8}  {'rows/s':>10}")
    for label, seconds in lines:
        print(f"{label.ljust(width)}  {seconds:8.2f}  {rate(rows, seconds):>10}")
    for name, target, base in baselines:
        ratio, first = base / warm["seconds"], base / cold["seconds"]
        print(
            f"(a)/{name} rows/s: {ratio:.2f} warm, {first:.2f} cold (target >= {target}) "
            f"{'met' if ratio >= target else 'MISSED'}"
        )
    for label, run in (("cold", cold), ("warm", warm)):
        steps = ", ".join(f"{k} {v:.2f} s" for k, v in run["steps"].items())
        print(f"(a) {label}: Dagster steps: {steps}")
        before, after = run["jobs"]
        everything = spark_job_ids(spark)
        print_spark_jobs(spark, before | (everything - after), f"(a) {label}")
    print(machine_line())
