"""Benchmark: is the memory of syncing a burst bounded by the range bound, or does it grow with
the burst?

Two bursts on one captured 7-column mixed-type table (the table of ``source_read.py``), each synced
through the real Dagster definitions the way the tests' harness does it (the sync sensor ticked
with ``build_sensor_context`` on an ``instance_for_test`` instance, every run it requests executed
in process, local[2] Spark):

A. one transaction inserting ``--rows`` rows (1,000,000; ``--quick``: 100,000). It cannot be
   split: one range holds it, so its memory must come from streaming, not from the range bound;
B. ``--transactions`` single-row transactions (100,000; ``--quick``: 10,000) with
   ``max_transactions_per_range`` = a tenth of that (10,000; quick 1,000): the sensor must cut
   them into at least 10 ranges of at most the bound each.

Each case runs again at a tenth of the size in the same invocation (the baseline; for B with the
same bound, so it is one range of the same size). Every measurement runs in a fresh child process
(its own Spark JVM), so one case's heap does not carry into the next: the child syncs the empty
table's snapshot, then waits; this process writes the burst into the emulator and runs capture
(not measured), then the child ticks and runs until the sensor is idle (measured). A sampler
thread here sums every 0.2 s the ``VmRSS`` of the child's whole process tree — the Python
driver, the Spark JVM it spawns and Spark's Python workers (found through ``/proc/*/stat``) —
and keeps the maximum.

How to read the figures: ``peak MB`` is the largest sampled sum during the sync; ``ratio`` is
that peak over the peak of the same case at a tenth of the size. A ratio near 1 means memory is
bounded by the range (B) or by streaming (A); a ratio near 10 means it grows with the burst.
``warm MB`` is the tree's RSS just before the sync (Spark started, snapshot run done): the part of
the peak no burst explains. RSS counts pages that forked Python workers share with their daemon
once per process, so the sums overstate; and how many workers Spark keeps alive at once varies
(each ~200 MB), so the breakdown below the table gives per kind of process the most processes at
once and the largest single one: a sum that grows by process count, not by process size, is not
memory the burst holds. ``tx/range`` is the
largest number of transactions in one range (from ``cdc.lsn_time_mapping``); rows/s is change
rows written over the seconds of the sync. The JVM heap is Spark's default (1g) unless
``--driver-memory`` sets ``spark.driver.memory``; the JVM grows its heap lazily up to that cap,
so a larger burst may show a larger JVM RSS without needing it. A ratio above 1 for A is read
with a smaller heap: if ``--cases A --driver-memory 512m`` still syncs the full burst, its peak
shows what the burst needs; a sync whose memory grew with the burst would fail there instead.

    .venv/bin/python benchmarks/burst_memory.py            # 1M-row transaction, 100k transactions
    .venv/bin/python benchmarks/burst_memory.py --quick    # 100k-row transaction, 10k transactions
    .venv/bin/python benchmarks/burst_memory.py --cases A --driver-memory 512m
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import _common
from _common import COLUMNS, PARAMS_PER_STATEMENT, machine_line, rate, wide_row

from cdc_assets import emulator

TABLE = "burst"
SAMPLE_SECONDS = 0.2
MARK = "@@burst "  # prefix of the child's protocol lines on its stdout
CHILD_EXIT_SECONDS = 120
LABELS = {"A": "A: one transaction", "B": "B: one-row transactions"}


# -- the process tree's memory -------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """The command name and parent pid of ``pid`` (None if it is gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name_end = text.rindex(")")
    return text[text.index("(") + 1 : name_end], int(text[name_end + 2 :].split()[1])


def process_tree(root: int) -> dict[int, str]:
    """``root`` and all its descendants: pid -> command name."""
    parents: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            names[int(entry)] = found[0]
            parents.setdefault(found[1], []).append(int(entry))
    tree, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in names:
            tree[pid] = names[pid]
            todo += parents.get(pid, [])
    return tree


def rss_kb(pid: int) -> int:
    """``VmRSS`` of ``pid`` in kB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def kind(pid: int, name: str, root: int) -> str:
    if pid == root:
        return "driver"
    return "jvm" if name == "java" else "workers"


@dataclass
class Peak:
    """Largest sampled RSS of the whole tree (MB); per kind of process (driver, jvm, workers) its
    largest sampled sum, most processes at once and largest single process."""

    total: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    largest: dict[str, float] = field(default_factory=dict)
    samples: int = 0

    def add(self, processes: list[tuple[str, float]]) -> None:
        self.total = max(self.total, sum(mb for _, mb in processes))
        for part in {name for name, _ in processes}:
            mbs = [mb for name, mb in processes if name == part]
            self.parts[part] = max(self.parts.get(part, 0.0), sum(mbs))
            self.counts[part] = max(self.counts.get(part, 0), len(mbs))
            self.largest[part] = max(self.largest.get(part, 0.0), max(mbs))
        self.samples += 1


class TreeSampler:
    """Samples the RSS of ``root``'s process tree every 0.2 s into the peak of the current
    phase (set ``phase``; None pauses)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.phase: str | None = None
        self.peaks: dict[str, Peak] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> list[tuple[str, float]]:
        """(kind, RSS MB) of every process in the tree."""
        return [
            (kind(pid, name, self.root), rss_kb(pid) / 1024)
            for pid, name in process_tree(self.root).items()
        ]

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            phase = self.phase
            if phase is None:
                continue
            self.peaks.setdefault(phase, Peak()).add(self.sample())

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


# -- the source and its bursts -------------------------------------------------------------------


def create_source(db: Path) -> None:
    """The captured, empty table; capture run once so its capture instance is established."""
    conn = emulator.connect(db, autocommit=True)
    try:
        _common.create_tables(conn, [TABLE])
    finally:
        conn.close()
    _common.capture(db)


def insert_one_transaction(db: Path, rows: int) -> None:
    """Rows ``0 .. rows - 1`` in multi-row INSERTs, all in one transaction."""
    per_statement = PARAMS_PER_STATEMENT // len(COLUMNS)
    marks = "(" + ", ".join(["?"] * len(COLUMNS)) + ")"
    sql = f"INSERT INTO [dbo].[{TABLE}] ({_common.column_list()}) VALUES "
    conn = emulator.connect(db, autocommit=False)
    try:
        cursor = conn.cursor()
        for lo in range(0, rows, per_statement):
            hi = min(rows, lo + per_statement)
            params = [value for i in range(lo, hi) for value in wide_row(i)]
            cursor.execute(sql + ", ".join([marks] * (hi - lo)), params)
        conn.commit()
    finally:
        conn.close()


def insert_small_transactions(db: Path, count: int) -> None:
    """``count`` transactions of one inserted row each (autocommit)."""
    marks = ", ".join(["?"] * len(COLUMNS))
    sql = f"INSERT INTO [dbo].[{TABLE}] ({_common.column_list()}) VALUES ({marks})"
    conn = emulator.connect(db, autocommit=True)
    try:
        cursor = conn.cursor()
        for i in range(count):
            cursor.execute(sql, list(wide_row(i)))
    finally:
        conn.close()


def write_burst(case: str, db: Path, size: int) -> None:
    if case == "A":
        insert_one_transaction(db, size)
    else:
        insert_small_transactions(db, size)
    _common.capture(db)


# -- the child: the project's definitions, driven like the tests' harness ------------------------


@dataclass
class Driver:
    """The sync sensor of one source, ticked on a Dagster instance; runs executed in process."""

    defs: Any
    source: Any
    instance: Any
    cursor: str | None = None

    def tick(self) -> Any:
        from cdc_assets.dagster.demo.in_process import tick_sensor

        data = tick_sensor(self.defs, self.instance, self.source.name, self.cursor)
        self.cursor = data.cursor
        return data

    def execute(self, request: Any) -> None:
        from cdc_assets.dagster.demo.in_process import execute_request
        from cdc_assets.dagster.sync.names import sync_job_name

        job = self.defs.resolve_job_def(sync_job_name(self.source.name))
        result = execute_request(job, self.instance, request)
        if not result.success:
            raise SystemExit(f"the run of {request.partition_key} failed")

    def sync(self, limit: int = 1_000) -> int:
        """Tick and execute until the sensor is idle; the number of runs."""
        for runs in range(limit):
            data = self.tick()
            if not data.run_requests:
                return runs
            self.execute(data.run_requests[0])
        raise SystemExit(f"the sensor still requests runs after {limit} runs")


def _emit(label: str, payload: dict[str, Any]) -> None:
    print(f"{MARK}{label} {json.dumps(payload)}", flush=True)


def _range_report(source: Any, keys: list[str]) -> dict[str, Any]:
    """Ranges, the most transactions in one (``cdc.lsn_time_mapping``), change rows written."""
    from cdc_assets.dagster.sync.chain import range_partitions
    from cdc_assets.sqlserver import range_stats

    ranges = range_partitions(keys)
    conn = source.connect()
    try:
        transactions = [range_stats(conn, r).transactions for r in ranges]
    finally:
        conn.close()
    rows = sum(
        (source.store.properties(t.change_log_key.path, r.key) or {}).get("rows", 0)
        for t in source.tables
        for r in ranges
    )
    return {"ranges": len(ranges), "transactions": transactions, "rows": rows}


def _heap(spark: Any) -> dict[str, Any]:
    runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
    return {
        "driver_memory": spark.sparkContext.getConf().get("spark.driver.memory", "1g (default)"),
        "max_heap_mb": runtime.maxMemory() / 2**20,
    }


def project_config(workdir: Path, bound: int, driver_memory: str | None) -> Any:
    """``_common.project_config`` for ``workdir/source.db``, with ``spark.driver.memory`` if
    given (read when Spark launches the JVM: the first run of the child)."""
    config = _common.project_config(workdir, workdir / "source.db", max_transactions=bound)
    if not driver_memory:
        return config
    conf = {**config.spark.conf, "spark.driver.memory": driver_memory}
    return config.model_copy(update={"spark": config.spark.model_copy(update={"conf": conf})})


def child(args: argparse.Namespace) -> int:
    """Snapshot, report READY, wait for GO on stdin, sync the burst, report RESULT."""
    from dagster import instance_for_test
    from pyspark.sql import SparkSession

    from cdc_assets.dagster.definitions_builder import build_definitions
    from cdc_assets.dagster.sync.names import partitions_name
    from cdc_assets.dagster.sync.source import load_source

    workdir = Path(args.workdir)
    config = project_config(workdir, args.max_transactions, args.driver_memory)
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    with instance_for_test() as instance:
        driver = Driver(defs, source, instance)
        driver.sync()  # the empty table's snapshot
        _emit("READY", _heap(SparkSession.builder.getOrCreate()))
        if sys.stdin.readline().strip() != "GO":
            return 1
        before = set(instance.get_dynamic_partitions(partitions_name(source.name)))
        started = time.perf_counter()
        runs = driver.sync()
        seconds = time.perf_counter() - started
        added = set(instance.get_dynamic_partitions(partitions_name(source.name))) - before
        _emit("RESULT", {"seconds": seconds, "runs": runs, **_range_report(source, list(added))})
    return 0


# -- this process: one case in a child, measured -------------------------------------------------


@dataclass
class Result:
    case: str
    size: int
    bound: int
    ranges: int
    max_transactions: int
    rows: int
    seconds: float
    warm: float
    peak: Peak
    heap: dict[str, Any]


def _read(stream: IO[str], label: str) -> dict[str, Any]:
    for line in stream:
        if line.startswith(MARK + label + " "):
            return json.loads(line[len(MARK) + len(label) + 1 :])
    raise SystemExit(f"the child ended before {label}")


@contextmanager
def _child(workdir: Path, bound: int, driver_memory: str | None) -> Iterator[subprocess.Popen]:
    command = [sys.executable, __file__, "--child", "--workdir", str(workdir)]
    command += ["--max-transactions", str(bound)]
    if driver_memory:
        command += ["--driver-memory", driver_memory]
    log = (workdir / "child.log").open("w")
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        yield process
    finally:
        if process.stdin is not None:
            process.stdin.close()  # a child still waiting for GO ends
        try:
            process.wait(timeout=CHILD_EXIT_SECONDS)  # the child stops Spark on its way out
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        if process.returncode:
            tail = (workdir / "child.log").read_text()[-3000:]
            print(f"the child ended with {process.returncode}; its log ends:\n{tail}")


def run_case(case: str, size: int, bound: int, base: Path, driver_memory: str | None) -> Result:
    workdir = base / f"{case}-{size}"
    workdir.mkdir()
    db = workdir / "source.db"
    create_source(db)
    with _child(workdir, bound, driver_memory) as process, TreeSampler(process.pid) as sampler:
        assert process.stdin is not None and process.stdout is not None
        heap = _read(process.stdout, "READY")
        write_burst(case, db, size)
        warm = sum(mb for _, mb in sampler.sample())
        sampler.phase = "sync"
        process.stdin.write("GO\n")
        process.stdin.flush()
        report = _read(process.stdout, "RESULT")
        sampler.phase = None
    if report["rows"] != size:
        raise SystemExit(f"{case}: {report['rows']:,} change rows written, {size:,} expected")
    return Result(
        case,
        size,
        bound,
        report["ranges"],
        max(report["transactions"], default=0),
        report["rows"],
        report["seconds"],
        warm,
        sampler.peaks.get("sync", Peak()),
        heap,
    )


def print_results(results: list[Result]) -> None:
    baseline: dict[str, Result] = {}
    for r in sorted(results, key=lambda r: -r.size):
        baseline[r.case] = r  # the smallest size of each case
    print(
        f"{'case (size: A rows, B transactions)':<36} {'size':>9} {'bound':>7} {'ranges':>6} "
        f"{'tx/range':>8} {'seconds':>8} {'rows/s':>8} {'warm MB':>8} {'peak MB':>8} {'ratio':>6}"
    )
    for r in results:
        label = LABELS[r.case] + (" (baseline)" if r is baseline[r.case] else "")
        ratio = r.peak.total / baseline[r.case].peak.total
        print(
            f"{label:<36} {r.size:>9,} {r.bound:>7,} {r.ranges:>6} {r.max_transactions:>8,} "
            f"{r.seconds:>8.1f} {rate(r.rows, r.seconds):>8} {r.warm:>8.0f} "
            f"{r.peak.total:>8.0f} {ratio:>6.2f}"
        )
    print(
        "peak MB by kind of process, each its own maximum (so they need not sum to the peak): "
        "sum [most processes at once, largest one]"
    )
    for r in results:
        parts = ", ".join(
            f"{k} {v:.0f} [{r.peak.counts[k]}, {r.peak.largest[k]:.0f}]"
            for k, v in sorted(r.peak.parts.items())
        )
        print(f"  {r.case} {r.size:>9,}: {parts}  ({r.peak.samples} samples)")
    heap = results[0].heap
    print(
        f"JVM heap: spark.driver.memory = {heap['driver_memory']} "
        f"(Runtime.maxMemory {heap['max_heap_mb']:.0f} MB)"
    )


def check(results: list[Result], *, full: bool) -> None:
    """Say whether the claims hold: A in one range of one transaction; B cut into ranges of at
    most the bound, at least 10 at the largest size."""
    for r in results:
        if r.case == "A" and (r.ranges, r.max_transactions) != (1, 1):
            print(f"A {r.size:,}: {r.ranges} ranges, {r.max_transactions} transactions: UNEXPECTED")
        if r.case == "B" and r.max_transactions > r.bound:
            print(f"B {r.size:,}: a range holds {r.max_transactions:,} > {r.bound:,}: MISSED")
    if not any(r.case == "B" for r in results):
        return
    largest = max((r for r in results if r.case == "B"), key=lambda r: r.size)
    enough = largest.ranges >= 10
    print(
        f"B {largest.size:,} transactions: {largest.ranges} ranges (target >= 10"
        f"{'' if full else ', at full size'}) {'met' if enough else 'MISSED'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="case A rows (1,000,000)")
    parser.add_argument(
        "--transactions", type=int, default=100_000, help="case B transactions (100,000)"
    )
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 10,000 transactions")
    parser.add_argument("--driver-memory", help="spark.driver.memory (default: Spark's, 1g)")
    parser.add_argument("--cases", default="AB", help="which cases to run (AB)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--max-transactions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    rows = 100_000 if args.quick else args.rows
    transactions = 10_000 if args.quick else args.transactions
    bound = max(1, transactions // 10)
    print(machine_line())
    cases = {
        "A": f"A = one transaction of {rows:,} rows",
        "B": f"B = {transactions:,} one-row transactions, max_transactions_per_range {bound:,}",
    }
    chosen = [text for case, text in cases.items() if case in args.cases.upper()]
    print(
        f"burst memory: {'; '.join(chosen)}; each also at a tenth; one child process (own "
        "Spark JVM, local[2]) per line"
    )
    plan = [
        ("A", max(1, rows // 10), 10_000),
        ("A", rows, 10_000),
        ("B", max(1, transactions // 10), bound),
        ("B", transactions, bound),
    ]
    plan = [p for p in plan if p[0] in args.cases.upper()]
    results = []
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        for case, size, case_bound in plan:
            results.append(run_case(case, size, case_bound, Path(directory), args.driver_memory))
            r = results[-1]
            print(f"  done {case} {size:,}: {r.seconds:.1f} s, peak {r.peak.total:.0f} MB")
    print_results(results)
    check(results, full=not args.quick)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
