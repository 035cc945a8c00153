"""Benchmark (issue 17): one range after a one-row change, at several numbers of captured tables.

For each table count N (10, 100, 1000 by default) it creates N small captured tables (5 rows
each) in the emulator, syncs them (snapshot and first range) through the project's definitions
on one warm local[2] Spark session, then UPDATEs one row of one table and times the range run the
sync sensor's logic requests (the tick, then change logs, checks, mirrors; in process). Target:
the run at the largest N within 2x the run at the smallest. Prints each run's seconds and step
seconds, how many tables the run worked on and read from the source (the quiet ones are
recorded in the sync state, not run).

    .venv/bin/python benchmarks/quiet_range.py               # 10, 100, 1000 tables
    .venv/bin/python benchmarks/quiet_range.py --quick       # 5, 20 tables
"""

from __future__ import annotations

import argparse
import cProfile
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from dagster import instance_for_test

from cdc_assets import emulator
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import step_seconds, sync_step
from cdc_assets.dagster.sync import change_log_outputs
from cdc_assets.dagster.sync.names import sync_job_name
from cdc_assets.dagster.sync.source import load_source

TARGET_RATIO = 2.0


def _update_one_row(db: Path, qty: int) -> None:
    conn = emulator.connect(db, autocommit=True)
    try:
        conn.execute(f"UPDATE [dbo].[t0000] SET [qty] = {qty} WHERE [id] = 1")
    finally:
        conn.close()
    _common.capture(db)


def run_size(count: int, workdir: Path, profile: Path | None = None) -> dict[str, Any]:
    db = workdir / "source.db"
    conn = emulator.connect(db, autocommit=True)
    try:
        names = [f"t{i:04d}" for i in range(count)]
        _common.create_tables(conn, names)
        for name in names:
            _common.insert_rows(conn, name, 0, 5)
    finally:
        conn.close()
    _common.capture(db)
    config = _common.project_config(workdir, db)
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    job = defs.resolve_job_def(sync_job_name(source.name))
    reads: list[str] = []
    real_read = change_log_outputs.sqlserver_source.read_change_range

    def counted(spark: Any, settings: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(instance.name)
        return real_read(spark, settings, instance, *args, **kwargs)

    change_log_outputs.sqlserver_source.read_change_range = counted
    try:
        with instance_for_test() as instance:
            setup_started = time.perf_counter()
            while True:  # snapshot, then the first range (the mirrors come up)
                tick, result = sync_step(job, instance, source)
                if result is None:
                    break
                assert result.success, f"setup run {tick.run_request} failed"
            # A range after the snapshot builds every mirror from it (the first range usually
            # ends before the snapshot LSN): one more change and range, so the measured range
            # finds every mirror built, as in a running sync.
            _update_one_row(db, qty=6)
            while (step := sync_step(job, instance, source))[1] is not None:
                assert step[1].success, f"setup run {step[0].run_request} failed"
            setup = time.perf_counter() - setup_started
            _update_one_row(db, qty=7)
            reads.clear()
            profiler = cProfile.Profile() if profile is not None else None
            started = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            tick, result = sync_step(job, instance, source)
            seconds = time.perf_counter() - started
            if profiler is not None and profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            assert result is not None and result.success, tick.skip_reason
            steps = step_seconds(instance, result.run_id)
            assert tick.run_request is not None
            in_run = len(tick.run_request.asset_selection or []) // 2  # change log + mirror
    finally:
        change_log_outputs.sqlserver_source.read_change_range = real_read
    return {"setup": setup, "seconds": seconds, "steps": steps, "read": len(reads), "run": in_run}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="10,100,1000", help="table counts")
    parser.add_argument("--quick", action="store_true", help="5 and 20 tables")
    parser.add_argument(
        "--profile", type=Path, help="write a cProfile of the largest run's range to this file"
    )
    args = parser.parse_args(argv)
    counts = [5, 20] if args.quick else [int(x) for x in args.tables.split(",")]
    print(machine_line())
    spark, started = _common.spark_session()
    print(f"one-row change, range run at {counts} tables (Spark warm, started in {started:.1f} s)")
    results = {}
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
            profile = args.profile if count == counts[-1] else None
            results[count] = r = run_size(count, Path(directory), profile)
        steps = ", ".join(f"{k.split('_', 1)[-1]} {v:.1f} s" for k, v in r["steps"].items())
        print(
            f"  {count:>5} tables: range run {r['seconds']:6.1f} s ({steps}); tables in the run: "
            f"{r['run']}, read from the source: {r['read']}; setup (snapshot + two ranges) "
            f"{r['setup']:.1f} s"
        )
    small, large = results[counts[0]]["seconds"], results[counts[-1]]["seconds"]
    ratio = large / small
    print(
        f"{counts[-1]} tables / {counts[0]} tables: {ratio:.2f}x (target <= {TARGET_RATIO}x) "
        f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}"
    )
    print(machine_line())
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
