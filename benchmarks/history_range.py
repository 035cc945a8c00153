"""Benchmark: a range applied to a table's history (SCD type 2) against the same range applied
to its mirror, in one run: what a range run's history step costs beside its mirror step.

For each kind of table (``--kinds``: ``plain``, keyed; ``keyless``, a multiset, as
``mirror_merge.py`` makes them) and each size (``--rows``: a demo-sized table of 3,000 rows and
a large one of 1M; 100k with ``--quick``; a keyless table has at least 1,000 rows per range,
its ranges change rows of their own), builds the mirror (as a snapshot's rebuild writes it)
and the history (every row a current version, as a snapshot's rebase writes it), then applies
``--repeats`` ranges of ``--changes`` change rows (1k: 60 % update before/after images, 25 %
inserts of new keys, 15 % deletes; ``mirror_merge.changes_frame``), each written first as a
change-log partition (not timed), to both:

- mirror: ``mirror_store.apply``, what the mirror asset calls (a range this small is merged in
  the driver, no Spark job);
- history: ``history_driver.apply``, what the history asset calls (a range this small is
  applied in the driver with deletion vectors: the current versions it closes written again
  closed, the new ones inserted, one commit, no Spark job);
- history (Spark MERGE): the same function made to take Spark's path (its driver threshold
  set to 0) into a twin history: what a range cost before the driver paths (keyless histories
  always took it), and still the path of a range too big for the driver.

Each history keeps every range's versions, so the later ranges meet a history of many files, as
a running sync's does. Prints seconds per range (the mean after a warm-up range) and
history/mirror. Target: the history ≤ 2× the mirror's update of the same range.

    .venv/bin/python benchmarks/history_range.py            # 3k and 1M rows, 1k changes
    .venv/bin/python benchmarks/history_range.py --quick    # 3k and 100k rows, 3 ranges
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line, rate
from mirror_merge import KEYLESS, KEYLESS_CHANGES, PLAIN, changes_frame, key_columns, table_frame
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import Lsn
from cdc_assets.spark import history_driver, history_store, mirror_store
from cdc_assets.spark.asset_store import AssetStore

TARGET = 2.0  # history seconds / mirror seconds, at most
KINDS = (PLAIN, KEYLESS)
PATHS = ("mirror", "history", "history (Spark MERGE)")


def with_commit_times(changes: DataFrame) -> DataFrame:
    """The change log's ``__$commit_time`` (a change log has it; the generator does not)."""
    return changes.withColumn("__$commit_time", F.localtimestamp())


def write_range(
    spark: SparkSession, store: AssetStore, change_log: list[str], changes: DataFrame, name: str
) -> int:
    count = changes.count()
    store.write(spark, changes, change_log, name, lambda _: {"rows": count}, rows=count)
    return count


def build(spark: SparkSession, store: AssetStore, kind: str, rows: int) -> dict[str, list[str]]:
    """The mirror, the history and the history's twin (for Spark's path) of one table."""
    keys = key_columns(kind)
    keys_of = {
        path: ["history" if "history" in path else "mirror", f"{kind}_{rows}_{i}"]
        for i, path in enumerate(PATHS)
    }
    frame = table_frame(spark, kind, rows)
    start = {"lsn": Lsn.from_int(1).hex}
    mirror_store.rebuild(spark, store, keys_of["mirror"], frame, start, rows, key_columns=keys)
    for path in PATHS[1:]:
        history_store.rebase(
            spark,
            store,
            keys_of[path],
            table_frame(spark, kind, rows),
            at=Lsn.from_int(1),
            at_time=None,
            key_columns=keys,
            properties=start,
            estimated_rows=rows,
        )
    return keys_of


def timed_range(
    spark: SparkSession,
    store: AssetStore,
    kind: str,
    rows: int,
    keys_of: dict[str, list[str]],
    run: int,
    changes: int,
) -> dict[str, float]:
    """One range written to the change log, then applied to the mirror and both histories."""
    keys = key_columns(kind)
    first = 10_000_000 + run * 100_000
    frame = with_commit_times(changes_frame(spark, kind, changes, rows, first, run))
    change_log = ["cdc", f"{kind}_{rows}_changes"]
    name = f"range-{run}"
    count = write_range(spark, store, change_log, frame.localCheckpoint(), name)
    properties = {"lsn": Lsn.from_int(first + changes).hex}
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    ranges = mirror_store.ChangeRanges(tuple(change_log), (name,), count, keys, None)
    mirror_store.apply(
        spark, store, ranges, to=keys_of["mirror"], properties=properties, mirror_rows=rows
    )
    seconds["mirror"] = time.perf_counter() - started
    for path in PATHS[1:]:
        threshold = history_driver.DRIVER_HISTORY_ROWS
        if path != "history":
            history_driver.DRIVER_HISTORY_ROWS = 0  # Spark's path
        try:
            started = time.perf_counter()
            history_driver.apply(
                spark,
                store,
                keys_of[path],
                change_log,
                [name],
                change_rows=count,
                key_columns=keys,
                after_lsn=None,
                properties=properties,
                history_rows=rows,
            )
            seconds[path] = time.perf_counter() - started
        finally:
            history_driver.DRIVER_HISTORY_ROWS = threshold
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="3000,1000000", help="table sizes (rows)")
    parser.add_argument("--changes", type=int, default=1000, help="change rows per range")
    parser.add_argument("--repeats", type=int, default=5, help="ranges timed (mean)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="plain, keyless")
    parser.add_argument("--quick", action="store_true", help="3k and 100k rows, 3 ranges")
    args = parser.parse_args(argv)
    sizes, repeats = [int(x) for x in args.rows.split(",")], args.repeats
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}: use {', '.join(KINDS)}")
    if args.quick:
        sizes, repeats = [3000, 100_000], 3
    changes = min(args.changes, KEYLESS_CHANGES) if KEYLESS in kinds else args.changes
    print(machine_line())
    spark, started = _common.spark_session()
    print(f"Spark session started in {started:.1f} s (not counted below)")
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        store = AssetStore(Path(directory))
        print(f"{'table':>8}  {'rows':>9}  " + "  ".join(f"{p:>21}" for p in PATHS))
        for kind in kinds:
            for size in sizes:
                # a keyless range changes ids of its own (KEYLESS_CHANGES a range): at least
                # that many rows per range
                rows = max(size, (repeats + 2) * KEYLESS_CHANGES) if kind == KEYLESS else size
                t0 = time.perf_counter()
                keys_of = build(spark, store, kind, rows)
                made = time.perf_counter() - t0
                print(f"  ({kind} {rows:,} rows: mirror and histories written in {made:.1f} s)")
                times: dict[str, list[float]] = {p: [] for p in PATHS}
                # the first range warms up (code generation, log state); a keyless range's
                # rows are ids no earlier range changed (``run``)
                for run in range(repeats + 1):
                    seconds = timed_range(spark, store, kind, rows, keys_of, run + 1, changes)
                    for path, s in seconds.items():
                        if run:
                            times[path].append(s)
                means = {p: sum(v) / len(v) for p, v in times.items()}
                print(
                    f"{kind:>8}  {rows:>9,}  "
                    + "  ".join(f"{means[p]:7.2f} s {rate(changes, means[p]):>11}" for p in PATHS)
                )
                ratio = means["history"] / means["mirror"]
                verdicts.append(
                    f"target ({kind}, {rows:,} rows, {changes:,} changes): history/mirror <= "
                    f"{TARGET}: {ratio:.2f} {'met' if ratio <= TARGET else 'MISSED'} (Spark's "
                    f"MERGE/mirror: {means['history (Spark MERGE)'] / means['mirror']:.2f})"
                )
    print("(seconds per range, then change rows per second)")
    for line in verdicts:
        print(line)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
