"""Benchmark: a range applied to a table's history (SCD type 2) against the same range applied
to its mirror, in one run.

Builds a keyed table of ``--rows`` rows (1M; 100k with ``--quick``) as a mirror (as a
snapshot's rebuild writes it: clustered by key, deletion vectors on) and as a history (every
row a current version, clustered by key), then applies ``--repeats`` ranges of ``--changes``
change rows (1k: 60 % update before/after images, 25 % inserts of new keys, 15 % deletes, keys
spread over the table; ``mirror_merge.changes_frame``), each written first as a change-log
partition (not timed), to both:

- mirror: ``mirror_store.apply``, what the mirror asset calls (a range this small is merged in
  the driver with deletion vectors, no Spark job);
- mirror (Spark MERGE): ``spark_merges.spark_merge_keyed``, Spark's MERGE of the same range (shown
  for scale: the path both take for a range too big for the driver);
- history: ``history_driver.apply``, what the history asset calls (a range this small is applied
  in the driver with deletion vectors: the changed keys' current versions closed, the new ones
  inserted, in one commit; a bigger one by one Spark MERGE).

Prints seconds per range, change rows per second, and history/mirror. Target: history ≤ 2× the
mirror's update of the same range.

    .venv/bin/python benchmarks/history_range.py            # 1M rows, 1k changes
    .venv/bin/python benchmarks/history_range.py --quick    # 100k rows
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line, rate
from mirror_merge import PLAIN, changes_frame, make_mirror, table_frame
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import Lsn
from cdc_assets.spark import history_driver, history_store, mirror_store, spark_merges
from cdc_assets.spark.asset_store import AssetStore

TARGET = 2.0  # history seconds / mirror seconds, at most


def with_commit_times(changes: DataFrame) -> DataFrame:
    """The change log's ``__$commit_time`` (a change log has it; the generator does not)."""
    return changes.withColumn("__$commit_time", F.localtimestamp())


def write_range(
    spark: SparkSession, store: AssetStore, change_log: list[str], changes: DataFrame, name: str
) -> int:
    count = changes.count()
    store.write(spark, changes, change_log, name, lambda _: {"rows": count}, rows=count)
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="table rows")
    parser.add_argument("--changes", type=int, default=1000, help="change rows per range")
    parser.add_argument("--repeats", type=int, default=5, help="ranges timed (mean)")
    parser.add_argument("--quick", action="store_true", help="100k rows, 3 ranges")
    args = parser.parse_args(argv)
    rows, repeats = args.rows, args.repeats
    if args.quick:
        rows, repeats = 100_000, 3
    print(machine_line())
    spark, started = _common.spark_session()
    print(f"Spark session started in {started:.1f} s (not counted below)")
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        store = AssetStore(Path(directory))
        mirror, spark_mirror, history = ["mirror", "t"], ["mirror", "t_spark"], ["history", "t"]
        change_log = ["cdc", "t_changes"]
        t0 = time.perf_counter()
        make_mirror(spark, store, mirror, PLAIN, rows)
        make_mirror(spark, store, spark_mirror, PLAIN, rows)
        history_store.rebase(
            spark,
            store,
            history,
            table_frame(spark, PLAIN, rows),
            at=Lsn.from_int(1),
            at_time=None,
            key_columns=("id",),
            properties={"lsn": Lsn.from_int(1).hex},
            estimated_rows=rows,
        )
        print(f"  ({rows:,}-row mirrors and history written in {time.perf_counter() - t0:.1f} s)")
        times: dict[str, list[float]] = {"mirror": [], "mirror (Spark MERGE)": [], "history": []}
        for r in range(repeats + 1):  # the first range warms up (code generation, log state)
            first = 10_000_000 + r * 100_000
            changes = changes_frame(spark, PLAIN, args.changes, rows, first)
            changes = with_commit_times(changes).localCheckpoint()
            name = f"range-{r}"
            count = write_range(spark, store, change_log, changes, name)
            properties = {"lsn": Lsn.from_int(first + 1000).hex}
            ranges = mirror_store.ChangeRanges(tuple(change_log), (name,), count, ("id",), None)
            s = time.perf_counter()
            mirror_store.apply(
                spark, store, ranges, to=mirror, properties=properties, mirror_rows=rows
            )
            mirror_s = time.perf_counter() - s
            s = time.perf_counter()
            frame = store.read_partitions(spark, change_log, [name])
            spark_merges.spark_merge_keyed(
                spark,
                store,
                spark_mirror,
                frame,
                key_columns=("id",),
                snapshot_lsn=None,
                properties=properties,
                target_rows=rows,
            )
            spark_s = time.perf_counter() - s
            s = time.perf_counter()
            history_driver.apply(
                spark,
                store,
                history,
                change_log,
                [name],
                change_rows=count,
                key_columns=("id",),
                after_lsn=None,
                properties=properties,
                history_rows=rows,
            )
            history_s = time.perf_counter() - s
            label = "warm-up" if r == 0 else f"range {r}"
            print(
                f"  {label:>8}: mirror {mirror_s:6.2f} s, mirror (Spark MERGE) {spark_s:6.2f} s, "
                f"history {history_s:6.2f} s"
            )
            if r:
                times["mirror"].append(mirror_s)
                times["mirror (Spark MERGE)"].append(spark_s)
                times["history"].append(history_s)
        means = {k: sum(v) / len(v) for k, v in times.items()}
        versions = spark.read.format("delta").load(store.location(history)).count()
    print(f"{'update':>22}  {'s/range':>8}  {'change rows/s':>14}")
    for what, seconds in means.items():
        print(f"{what:>22}  {seconds:8.2f}  {rate(args.changes, seconds):>14}")
    print(f"  (history: {versions:,} versions after {repeats + 1} ranges into {rows:,} rows)")
    ratio = means["history"] / means["mirror"]
    spark_ratio = means["history"] / means["mirror (Spark MERGE)"]
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(
        f"target: {args.changes:,} changes into {rows:,} rows, history/mirror <= {TARGET}: "
        f"{ratio:.2f} {verdict} (history/mirror's Spark MERGE: {spark_ratio:.2f})"
    )
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
