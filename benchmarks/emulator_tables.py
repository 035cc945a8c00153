"""Benchmark: the emulator's cost per table as the number of captured tables grows.

For 10, 100 and 1,000 small tables (three columns, primary key) it times, in one emulator
database per size,

- ``create``: ``CREATE TABLE`` of every table;
- ``enable``: ``sys.sp_cdc_enable_table`` of every table;
- ``first scan``: the capture scan that establishes every capture instance's ``start_lsn``;
- ``idle scan``: a capture scan with nothing to capture;
- ``1-row scan``: one UPDATE of one row of one table, then the capture scan that captures it;
  (the scans run on one kept connection, as the capture agent's do);
- ``new conn``: ``emulator.connect`` and ``sys.fn_cdc_get_max_lsn()`` on it (SQLite's
  schema parse included; the catalog is shared with the process's other connections);
- ``scan(path)``: ``emulator.scan(path)``, which opens its own SQLite connection.

and prints per-table milliseconds for the first two and the ratio of each size's per-table (or
per-scan) cost to the smallest size's: a cost that grows with the number of tables per table is
quadratic. Times are this process's CPU seconds (the emulator, SQLite included, runs in it), so
other load on a shared machine does not blur the ratios; ``--wall`` measures wall-clock time.
The tables are made with :func:`cdc_assets.workload.create_captured_tables`.

What remains above 1x at 1,000 tables is SQLite's own: every CREATE TABLE / INDEX / TRIGGER scans
``sqlite_master`` (about 13 schema objects per captured table), and every new SQLite connection
(``emulator.scan(path)`` opens one) parses the whole schema.

    .venv/bin/python benchmarks/emulator_tables.py            # 10, 100, 1000 tables
    .venv/bin/python benchmarks/emulator_tables.py --quick    # 10, 30, 100 tables
    .venv/bin/python benchmarks/emulator_tables.py --profile  # cProfile of the largest size
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _common import machine_line

from cdc_assets import emulator
from cdc_assets.emulator.cdc import capture
from cdc_assets.sqlserver.lsn_queries import find_max_lsn
from cdc_assets.workload import create_captured_tables

STEPS = ("create", "enable", "first scan", "idle scan", "1-row scan", "new conn", "scan(path)")
PER_TABLE = ("create", "enable")


CLOCK: Callable[[], float] = time.process_time


def _timed(action: Callable[[], object]) -> float:
    started = CLOCK()
    action()
    return CLOCK() - started


def run_size(count: int, workdir: Path, profiler: cProfile.Profile | None) -> dict[str, float]:
    path = workdir / f"tables_{count}.db"
    seconds: dict[str, float] = {}
    conn = emulator.connect(path, autocommit=True)
    try:
        if profiler is not None:
            profiler.enable()
        tables = create_captured_tables(conn, count, timings=seconds, clock=CLOCK)
        agent = capture.open_db(path)
        try:
            seconds["first scan"] = _timed(lambda: capture.scan_db(agent))
            seconds["idle scan"] = _timed(lambda: capture.scan_db(agent))
            middle = tables[len(tables) // 2]
            conn.execute(f"UPDATE {middle.quoted} SET [qty] = [qty] + 1 WHERE [id] = 1")

            def one_row_scan() -> None:
                if capture.scan_db(agent) != 1:
                    raise SystemExit("the capture scan did not capture the one-row transaction")

            seconds["1-row scan"] = _timed(one_row_scan)
        finally:
            agent.close()

        def new_connection() -> None:
            fresh = emulator.connect(path, autocommit=True)
            try:
                find_max_lsn(fresh)
            finally:
                fresh.close()

        seconds["new conn"] = _timed(new_connection)
        seconds["scan(path)"] = _timed(lambda: emulator.scan(path))
        if profiler is not None:
            profiler.disable()
    finally:
        conn.close()
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="10,100,1000", help="table counts (10,100,1000)")
    parser.add_argument("--quick", action="store_true", help="10, 30 and 100 tables")
    parser.add_argument("--profile", action="store_true", help="cProfile of the largest size")
    parser.add_argument("--wall", action="store_true", help="wall-clock instead of CPU time")
    args = parser.parse_args(argv)
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    counts = [10, 30, 100] if args.quick else [int(x) for x in args.tables.split(",")]
    print(machine_line())
    clock = "wall-clock" if args.wall else "CPU"
    print(f"emulator tables: {', '.join(map(str, counts))} captured tables; {clock} time")
    results: dict[int, dict[str, float]] = {}
    profiler: cProfile.Profile | None = None
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        for count in counts:
            profiler = cProfile.Profile() if args.profile and count == counts[-1] else None
            results[count] = run_size(count, Path(directory), profiler)
    base = counts[0]
    header = "".join(f"{step:>14}" for step in STEPS)
    print(f"\n{'tables':>7}{header}")
    for count in counts:
        cells = []
        for step in STEPS:
            value = results[count][step]
            if step in PER_TABLE:
                cells.append(f"{value * 1000 / count:.2f} ms/tbl")
            else:
                cells.append(f"{value * 1000:.1f} ms")
        print(f"{count:>7}" + "".join(f"{c:>14}" for c in cells))
    largest = counts[-1]
    ratios = {}
    for step in STEPS:
        scale = (largest / base) if step in PER_TABLE else 1.0
        ratios[step] = results[largest][step] / max(results[base][step] * scale, 1e-9)

    def listed(steps: list[str]) -> str:
        return ", ".join(f"{step} {ratios[step]:.2f}x" for step in steps)

    print(
        f"\nat {largest} vs {base} tables ({largest // base}x the tables): per-table cost "
        f"{listed([s for s in STEPS if s in PER_TABLE])} (1x: linear in the number of tables; "
        f"growing: quadratic); per-call cost {listed([s for s in STEPS if s not in PER_TABLE])}"
    )
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
