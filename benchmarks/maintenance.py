"""Benchmark: the maintenance job's work per Delta table (``table_maintenance.keep_bounded``), for
a table with files to delete and for a quiet one.

Creates ``--tables`` small Delta tables of two versions each (an overwrite leaves the first
version's files to delete) and runs ``keep_bounded`` over all of them twice with no history kept:
the first pass VACUUMs every table (the baseline: what every pass cost before quiet tables were
passed over), the second finds nothing left to delete since that VACUUM and only reads each
table's history. Prints seconds per table and second/first; target: a quiet table at most 0.25×
a vacuumed one, so a source of hundreds of mostly quiet tables is maintained in minutes.

    .venv/bin/python benchmarks/maintenance.py             # 20 tables
    .venv/bin/python benchmarks/maintenance.py --quick     # 5 tables
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line

from cdc_assets.spark.table_maintenance import keep_bounded

TARGET_RATIO = 0.25


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 tables")
    args = parser.parse_args()
    count = 5 if args.quick else args.tables
    spark, startup = _common.spark_session()
    print(f"Spark session started in {startup:.1f} s; {count} Delta tables of two versions")
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        uris = [str(Path(directory) / f"t{i:04d}") for i in range(count)]
        for uri in uris:
            spark.range(1000).write.format("delta").save(uri)
            spark.range(500).write.format("delta").mode("overwrite").save(uri)
        seconds: dict[str, float] = {}
        for label in ("vacuumed", "quiet"):
            started = time.perf_counter()
            done = [keep_bounded(spark, uri, 0) for uri in uris]
            seconds[label] = (time.perf_counter() - started) / count
            skipped = sum(d.skipped for d in done)
            print(f"  {label:<9} {seconds[label]:6.2f} s per table ({skipped} passed over)")
    ratio = seconds["quiet"] / seconds["vacuumed"]
    print(
        f"quiet/vacuumed: {ratio:.2f}x (target <= {TARGET_RATIO}) "
        f"{'met' if ratio <= TARGET_RATIO else 'MISSED'}"
    )
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
