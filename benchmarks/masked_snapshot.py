"""Benchmark: a snapshot with two hashed columns against the same snapshot without column rules.

Builds one 7-column mixed-type table of ``--rows`` rows in the emulator (the table of
``source_read.py``, loaded before CDC is enabled), then materializes its ``snapshot`` partition
through the real Dagster definitions on one warm local[2] Spark session, twice per variant:

(a) masked: ``columns.rules`` hash ``name`` (nvarchar(50)) and ``price`` (decimal(18,4)) with an
    HMAC-SHA256 key from the environment: the executors' readers hash them as the rows arrive;
(b) baseline: the same table, the same settings, no column rules.

The first run of each (cold Python data source workers) is not counted; the warm runs alternate
(b), (a). Prints rows/s of each and the ratio of rows/s (a)/(b) (target >= 0.8), and checks
that (a) stored hashes (64 hex characters) where (b) stored the values.

    .venv/bin/python benchmarks/masked_snapshot.py            # 1,000,000 rows
    .venv/bin/python benchmarks/masked_snapshot.py --quick    # 50,000 rows
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from snapshot_run import run_snapshot

from cdc_assets.config import parse_config
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION

TABLE = "bench"
TARGET = 0.8
KEY_ENV = "CDC_BENCH_HASH_KEY"
HASHED = ("name", "price")


def config_for(workdir: Path, db: Path, chunk_rows: int, *, masked: bool) -> Any:
    columns = (
        {
            "hash_key_env": KEY_ENV,
            "rules": [{"tables": f"dbo.{TABLE}", "columns": list(HASHED), "rule": "hash"}],
        }
        if masked
        else {}
    )
    return parse_config(
        {
            "sources": [
                {
                    "name": "bench",
                    "connection": {"emulator": {"path": str(db)}},
                    "snapshot": {"mode": "exact", "chunk_rows": chunk_rows},
                    "columns": columns,
                }
            ],
            "storage": {"base_path": str(workdir / "storage")},
            "spark": {"master": "local[2]", "conf": _common.SPARK_CONF},
        },
        base_dir=workdir,
        origin="benchmark config",
    )


def snapshot_seconds(
    spark: Any, workdir: Path, db: Path, chunk_rows: int, rows: int, *, masked: bool
) -> float:
    """One run of the sync job for the ``snapshot`` partition; its seconds (checked after)."""
    config = config_for(workdir, db, chunk_rows, masked=masked)
    run = run_snapshot(config)
    if not run.success:
        raise SystemExit(f"the {'masked' if masked else 'baseline'} snapshot run failed")
    if run.published.get("rows") != rows:
        raise SystemExit(f"published {run.published.get('rows')} rows, expected {rows:,}")
    source, table, seconds = run.source, run.table, run.seconds
    stored = source.store.read(spark, table.change_log_key.path, SNAPSHOT_PARTITION)
    sample = stored.where("name IS NOT NULL").select(*HASHED).limit(1).collect()[0]
    looks_hashed = all(isinstance(v, str) and len(v) == 64 for v in sample)
    if looks_hashed != masked:
        raise SystemExit(f"{'masked' if masked else 'baseline'} run stored {sample}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="a small run (50,000 rows)")
    parser.add_argument(
        "--chunk-rows", type=int, default=250_000, help="snapshot.chunk_rows (250,000)"
    )
    args = parser.parse_args(argv)
    rows = 50_000 if args.quick else args.rows
    chunk_rows = min(args.chunk_rows, max(1, rows // 4)) if args.quick else args.chunk_rows
    os.environ.setdefault(KEY_ENV, "benchmark-key-not-a-secret")
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        workdir = Path(directory)
        db = workdir / "source.db"
        built = _common.build_wide_table(db, rows, TABLE)
        print(
            f"masked snapshot: {rows:,} rows x {len(_common.COLUMNS)} columns, built in "
            f"{built:.1f} s; chunk_rows {chunk_rows:,}; hashed: {', '.join(HASHED)}; local[2]"
        )
        spark, started = _common.spark_session()
        print(f"Spark session started in {started:.1f} s (not counted below)")
        for masked in (False, True):  # cold runs: the data source's first tasks, not counted
            snapshot_seconds(spark, workdir / f"cold{masked}", db, chunk_rows, rows, masked=masked)
        baseline = snapshot_seconds(spark, workdir / "b", db, chunk_rows, rows, masked=False)
        masked = snapshot_seconds(spark, workdir / "a", db, chunk_rows, rows, masked=True)
        lines = [("(a) masked: two hashed columns", masked), ("(b) baseline: no rules", baseline)]
        width = max(len(label) for label, _ in lines)
        print(f"{'pipeline'.ljust(width)}  {'seconds':>8}  {'rows/s':>10}")
        for label, seconds in lines:
            print(f"{label.ljust(width)}  {seconds:8.2f}  {_common.rate(rows, seconds):>10}")
        ratio = baseline / masked
        verdict = "ok" if ratio >= TARGET else "BELOW TARGET"
        print(f"ratio of rows/s (a)/(b): {ratio:.2f} (target >= {TARGET}): {verdict}")
        print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
