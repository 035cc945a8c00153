"""Benchmark (issue 38): a one-row change in one table while another table's big snapshot runs.

A source with a small table syncs; its one-row changes are timed from the commit to the end of
the range run that brings its mirror there (capture scan, the sync sensor's decision, the run:
change logs, checks, mirrors; in process, one warm local[2] Spark session). Then a big table
(``--rows`` rows) is captured too and the code location reloaded: the sensor asks for its
snapshot run, which runs in a thread of its own, and the same one-row changes are timed while it
runs. Target: the median with the snapshot running within 2x the median without.

    .venv/bin/python benchmarks/snapshot_beside_ranges.py              # 10M-row snapshot
    .venv/bin/python benchmarks/snapshot_beside_ranges.py --quick      # 500k rows
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from dagster import DagsterInstance, instance_for_test

from cdc_assets import emulator
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import execute_request, sync_step
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, sync_job_name
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.dagster.sync_sensor import evaluate

TARGET_RATIO = 2.0


def _definitions(workdir: Path, db: Path) -> tuple[Any, Any, Any]:
    config = _common.project_config(workdir, db)
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    return source, defs, defs.resolve_job_def(sync_job_name(source.name))


def _one_row_change(db: Path, qty: int) -> float:
    """Commit a one-row UPDATE of the small table; the moment it committed."""
    conn = emulator.connect(db, autocommit=True)
    try:
        conn.execute(f"UPDATE [dbo].[small] SET [qty] = {qty} WHERE [id] = 1")
    finally:
        conn.close()
    return time.perf_counter()


def _commit_to_mirror(
    db: Path, instance: DagsterInstance, source: Any, job: Any, qty: int
) -> tuple[float, str]:
    """Seconds from a one-row commit to the end of the range run that brings it to the mirror;
    the partition it ran."""
    committed = _one_row_change(db, qty)
    _common.capture(db)
    while True:
        tick, result = sync_step(job, instance, source)
        if result is None:
            raise SystemExit(f"the sensor asked for no run: {tick.skip_reason}")
        assert result.success, f"run {tick.run_request} failed"
        request = tick.run_request
        assert request is not None
        if request.partition_key != SNAPSHOT_PARTITION:
            return time.perf_counter() - committed, str(request.partition_key)


def _settle(instance: DagsterInstance, source: Any, job: Any) -> None:
    """Sync until the sensor has nothing left to run."""
    while sync_step(job, instance, source)[1] is not None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 500k-row big table")
    parser.add_argument("--rows", type=int, default=None, help="rows of the big table")
    parser.add_argument("--changes", type=int, default=None, help="one-row changes per phase")
    args = parser.parse_args()
    rows = args.rows or (500_000 if args.quick else 10_000_000)
    changes = args.changes or (5 if args.quick else 8)
    print(machine_line())
    _spark, spark_seconds = _common.spark_session()
    print(f"spark session: {spark_seconds:.1f} s")
    with tempfile.TemporaryDirectory(prefix="cdc-bench-") as tmp, instance_for_test() as instance:
        workdir = Path(tmp)
        db = workdir / "source.db"
        conn = emulator.connect(db, autocommit=True)
        try:
            _common.create_tables(conn, ["small"])
            _common.insert_rows(conn, "small", 0, 5)
        finally:
            conn.close()
        built = time.perf_counter()
        conn = emulator.connect(db, autocommit=True)
        try:  # the big table, not captured yet
            body = ", ".join(f"[{n}] {d}" for n, d in _common.COLUMNS)
            conn.execute(
                f"CREATE TABLE [dbo].[big] ({body}, CONSTRAINT [pk_big] PRIMARY KEY ([id]))"
            )
            _common.insert_rows(conn, "big", 0, rows)
        finally:
            conn.close()
        _common.capture(db)
        print(
            f"source: small (5 rows) and big ({rows:,} rows, not captured yet), built in "
            f"{time.perf_counter() - built:.1f} s"
        )

        source, _defs, job = _definitions(workdir, db)
        _settle(instance, source, job)
        _commit_to_mirror(db, instance, source, job, 1)  # warm: the mirror's first range
        alone = [_commit_to_mirror(db, instance, source, job, 10 + i)[0] for i in range(changes)]

        conn = emulator.connect(db, autocommit=True)
        try:
            _common.enable_table(conn, "big")
        finally:
            conn.close()
        _common.capture(db)
        source, _defs, job = _definitions(workdir, db)  # the code location reloaded
        tick = evaluate(instance, source, job.partitions_def)
        snapshot = next(r for r in tick.run_requests if r.partition_key == SNAPSHOT_PARTITION)
        outcome: dict[str, Any] = {}

        def snapshot_run() -> None:
            started = time.perf_counter()
            outcome["result"] = execute_request(job, instance, snapshot)
            outcome["seconds"] = time.perf_counter() - started

        runner = threading.Thread(target=snapshot_run, daemon=True)
        runner.start()
        time.sleep(2.0)  # the run is in flight: its tables are busy
        beside: list[float] = []
        while runner.is_alive() and len(beside) < changes:
            beside.append(_commit_to_mirror(db, instance, source, job, 100 + len(beside))[0])
        during = len(beside)
        runner.join()
        result = outcome["result"]
        assert result.success, "the big table's snapshot run failed"
        print(
            f"big table's snapshot: {rows:,} rows in {outcome['seconds']:.1f} s "
            f"({_common.rate(rows, outcome['seconds'])} rows/s), beside {during} range runs"
        )
        if not beside:
            raise SystemExit("the snapshot ended before a change could be timed beside it")
        print()
        print("| one-row change in another table, commit -> mirror | median s | max s | n |")
        print("|---|---|---|---|")
        print(
            f"| no snapshot running | {statistics.median(alone):.2f} | {max(alone):.2f} | "
            f"{len(alone)} |"
        )
        print(
            f"| beside the {rows:,}-row snapshot | {statistics.median(beside):.2f} | "
            f"{max(beside):.2f} | {len(beside)} |"
        )
        ratio = statistics.median(beside) / statistics.median(alone)
        verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
        print(f"\nratio beside / alone: {ratio:.2f} (target <= {TARGET_RATIO}): {verdict}")


if __name__ == "__main__":
    main()
