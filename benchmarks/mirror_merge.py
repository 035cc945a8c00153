"""Benchmark: incremental mirror merge (``merge_keyed``) against recomputation from the snapshot.

Generates in Spark, as Parquet (as the change-log and mirror assets store them), a keyed
7-column mirror of ``--table-rows`` rows, the snapshot it started from, a history of
``--history`` change rows already applied to it, and new ranges of 10k / 100k / 1M change rows
(60 % update before/after images, 25 % inserts of new keys, 15 % deletes, keys spread over the
table). For each new range it times

- incremental: ``merge_keyed(current mirror, new range)``, coalesced and written as Parquet, then
  the written rows counted — what the mirror asset does;
- recompute: ``merge_keyed(snapshot, history + new range)`` written the same way.

Prints seconds, rows/s of changes, and incremental/recompute (target <= 0.5). Then it repeats
the incremental merge of the smallest range on tables of other sizes (``--table-sizes``) to show
whether the cost grows with the changes or with the table.

    .venv/bin/python benchmarks/mirror_merge.py            # 1M-row mirror, 10k/100k/1M changes
    .venv/bin/python benchmarks/mirror_merge.py --quick    # 100k-row mirror, 1k/10k/100k
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import machine_line, rate
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.spark.mirror_merge import merge_keyed

TARGET = 0.5
LSN_WIDTH = 20  # hex digits of a binary(10) LSN
DATA = """
    id,
    CASE WHEN id % 10 = 0 THEN NULL ELSE CAST(id % 1000 + {v} AS INT) END AS qty,
    CAST((id * 7919 % 1000000000) / 10000 AS DECIMAL(18,4)) AS price,
    CASE WHEN id % 13 = 0 THEN NULL ELSE concat('item ', id, ' v{v} – naïve') END AS name,
    CAST(TIMESTAMP_NTZ '2024-01-01 00:00:00' + make_dt_interval(0, 0, 0, id % 86400) AS
         TIMESTAMP_NTZ) AS created,
    id % 3 = 0 AS active,
    unhex(lpad(hex(id * 2654435761), 16, '0')) AS payload
"""


def _lsn(expr: str) -> str:
    return f"unhex(lpad(hex({expr}), {LSN_WIDTH}, '0'))"


def table_frame(spark: SparkSession, rows: int, version: int = 0) -> DataFrame:
    return (
        spark.range(rows)
        .selectExpr(*[c.strip() for c in _split(DATA.format(v=version))])
        .repartition(2)
    )


def _split(text: str) -> list[str]:
    """The select list at top-level commas."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "("
        depth -= ch in ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def changes_frame(spark: SparkSession, count: int, table_rows: int, first_lsn: int) -> DataFrame:
    """``count`` change rows with LSNs from ``first_lsn``: 60 % update pairs (3 then 4),
    25 % inserts of new keys, 15 % deletes; one transaction per 10 changes."""
    pairs = count * 3 // 10
    inserts = count * 25 // 100
    deletes = count - 2 * pairs - inserts
    data = [c.strip() for c in _split(DATA.format(v=first_lsn % 7 + 1))]
    meta = [
        _lsn(f"{first_lsn} + seq DIV 10") + " AS `__$start_lsn`",
        "CAST(NULL AS INT) AS `__$command_id`",
        _lsn("seq") + " AS `__$seqval`",
        "op AS `__$operation`",
        "unhex('7F') AS `__$update_mask`",
    ]
    spread = max(1, table_rows // max(1, pairs + deletes))
    updates = (
        spark.range(pairs)
        .selectExpr(f"id * {spread} % {table_rows} AS id", "id AS n")
        .crossJoin(spark.range(3, 5).selectExpr("CAST(id AS INT) AS op"))
        .selectExpr("id", "op", "n * 2 + op - 3 AS seq")
    )
    new_keys = spark.range(inserts).selectExpr(
        f"{table_rows} + {first_lsn} * 10 + id AS id", "2 AS op", f"{2 * pairs} + id AS seq"
    )
    gone = spark.range(deletes).selectExpr(
        f"(id * {spread} + {spread // 2}) % {table_rows} AS id",
        "1 AS op",
        f"{2 * pairs + inserts} + id AS seq",
    )
    keyed = updates.unionByName(new_keys).unionByName(gone)
    return keyed.selectExpr("seq", "op", *data).selectExpr(*meta, *[f"`{c}`" for c in COLUMNS])


COLUMNS = ("id", "qty", "price", "name", "created", "active", "payload")


def write(df: DataFrame, path: Path) -> Path:
    df.write.parquet(str(path))
    return path


def merge_and_write(spark: SparkSession, mirror: Path, changes: list[Path], out: Path) -> int:
    """What the mirror asset does: read, merge_keyed, coalesce, write Parquet, count."""
    base = spark.read.parquet(str(mirror)).select(*[f"`{c}`" for c in COLUMNS])
    frames = [spark.read.parquet(str(p)) for p in changes]
    change_df = frames[0]
    for frame in frames[1:]:
        change_df = change_df.unionByName(frame)
    merged = merge_keyed(base, change_df, key_columns=["id"])
    merged.coalesce(max(1, spark.sparkContext.defaultParallelism)).write.parquet(str(out))
    return spark.read.parquet(str(out)).count()


def timed_merge(
    spark: SparkSession, mirror: Path, changes: list[Path], out: Path
) -> tuple[int, float]:
    started = time.perf_counter()
    rows = merge_and_write(spark, mirror, changes, out)
    return rows, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-rows", type=int, default=1_000_000, help="mirror rows (1M)")
    parser.add_argument(
        "--changes", default="10000,100000,1000000", help="new range sizes (10k,100k,1M)"
    )
    parser.add_argument(
        "--history", type=int, default=1_000_000, help="change rows already applied (1M)"
    )
    parser.add_argument(
        "--table-sizes", default="250000,1000000,2000000", help="tables for the growth check"
    )
    parser.add_argument("--quick", action="store_true", help="100k rows, 1k/10k/100k changes")
    parser.add_argument("--profile", action="store_true", help="Spark jobs of each merge")
    args = parser.parse_args(argv)
    if args.quick:
        table_rows, sizes, history = 100_000, [1_000, 10_000, 100_000], 100_000
        table_sizes = [25_000, 100_000, 200_000]
    else:
        table_rows, history = args.table_rows, args.history
        sizes = [int(x) for x in args.changes.split(",")]
        table_sizes = [int(x) for x in args.table_sizes.split(",")]
    print(machine_line())
    spark, started = _common.spark_session()
    print(f"Spark session started in {started:.1f} s (not counted below)")
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        work = Path(directory)
        t0 = time.perf_counter()
        snapshot = write(table_frame(spark, table_rows), work / "snapshot")
        past = [
            write(
                changes_frame(spark, history // 4, table_rows, 1_000_000 * (i + 1)), work / f"h{i}"
            )
            for i in range(4)
        ]
        current = work / "current"
        rows, _ = timed_merge(spark, snapshot, past, current)
        new = {
            n: write(changes_frame(spark, n, table_rows, 10_000_000 + n), work / f"new{n}")
            for n in sizes
        }
        print(
            f"mirror merge: {rows:,}-row mirror (snapshot {table_rows:,} rows + {history:,} "
            f"change rows in 4 ranges applied), new ranges of {', '.join(f'{n:,}' for n in sizes)}"
            f" change rows; data generated in {time.perf_counter() - t0:.1f} s, local[2]"
        )
        # Warm-up: the first merge of a session pays for code generation and class loading.
        timed_merge(spark, current, [new[sizes[0]]], work / "warmup")
        print(
            f"{'new changes':>12}  {'incremental s':>13}  {'changes/s':>10}  {'recompute s':>11}  "
            f"{'ratio':>6}"
        )
        results = []
        for n in sizes:
            before = _common.spark_job_ids(spark)
            inc_rows, inc = timed_merge(spark, current, [new[n]], work / f"inc{n}")
            middle = _common.spark_job_ids(spark)
            full_rows, full = timed_merge(spark, snapshot, [*past, new[n]], work / f"full{n}")
            if inc_rows != full_rows:
                raise SystemExit(f"{n}: incremental {inc_rows:,} rows, recompute {full_rows:,}")
            results.append((n, inc, full))
            print(f"{n:>12,}  {inc:13.2f}  {rate(n, inc):>10}  {full:11.2f}  {inc / full:6.2f}")
            if args.profile:
                everything = _common.spark_job_ids(spark)
                _common.print_spark_jobs(
                    spark, before | (everything - middle), f"  incremental {n:,}"
                )
                _common.print_spark_jobs(spark, middle, f"  recompute {n:,}")
        worst = max(inc / full for _, inc, full in results)
        print(
            f"incremental/recompute: worst {worst:.2f} (target <= {TARGET}) "
            f"{'met' if worst <= TARGET else 'MISSED'}"
        )

        smallest = sizes[0]
        print(f"growth: incremental merge of {smallest:,} changes into tables of other sizes")
        print(f"{'table rows':>12}  {'seconds':>8}  {'table rows/s':>12}")
        for size in table_sizes:
            mirror = write(table_frame(spark, size), work / f"table{size}")
            changes = write(
                changes_frame(spark, smallest, size, 20_000_000 + size), work / f"c{size}"
            )
            _, seconds = timed_merge(spark, mirror, [changes], work / f"g{size}")
            print(f"{size:>12,}  {seconds:8.2f}  {rate(size, seconds):>12}")
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
