"""Benchmark: the maintenance job's work per Delta table (``table_maintenance.keep_bounded``), for
a table with files to delete and for a quiet one, by Spark and by the driver.

Creates ``--tables`` small Delta tables of two versions each, twice (an overwrite leaves the first
version's files to delete), and runs the maintenance of every table of each set twice with no
history kept: one set by Spark (``keep_bounded_with_spark``: the path of tables on object
stores; the first pass VACUUMs every table, the second finds nothing left to delete since that
VACUUM and only reads each table's history), the other by the driver (``keep_bounded`` of a
local table: the history setting a commit of its own, VACUUM a listing of the table's folder,
no Spark job). Prints seconds per table; targets: a quiet table by Spark at most 0.25x a
vacuumed one, and a vacuumed table by the driver at most 0.25x one by Spark.

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

from cdc_assets.spark.table_maintenance import keep_bounded, keep_bounded_with_spark

TARGET_RATIO = 0.25


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="5 tables")
    args = parser.parse_args()
    count = 5 if args.quick else args.tables
    spark, startup = _common.spark_session()
    print(f"Spark session started in {startup:.1f} s; 2 x {count} Delta tables of two versions")
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        for by, upkeep in (("spark", keep_bounded_with_spark), ("driver", keep_bounded)):
            uris = [str(Path(directory) / f"{by}{i:04d}") for i in range(count)]
            for uri in uris:
                spark.range(1000).write.format("delta").save(uri)
                spark.range(500).write.format("delta").mode("overwrite").save(uri)
            for label in ("vacuumed", "quiet"):
                started = time.perf_counter()
                done = [upkeep(spark, uri, 0) for uri in uris]
                seconds[f"{by} {label}"] = (time.perf_counter() - started) / count
                skipped = sum(d.skipped for d in done)
                print(
                    f"  {by:<6} {label:<9} {seconds[f'{by} {label}']:6.3f} s per table "
                    f"({skipped} passed over)"
                )
    quiet = seconds["spark quiet"] / seconds["spark vacuumed"]
    driver = seconds["driver vacuumed"] / seconds["spark vacuumed"]
    print(
        f"Spark quiet/vacuumed: {quiet:.2f}x, driver/Spark vacuumed: {driver:.2f}x "
        f"(targets <= {TARGET_RATIO}) "
        f"{'met' if quiet <= TARGET_RATIO and driver <= TARGET_RATIO else 'MISSED'}"
    )
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
