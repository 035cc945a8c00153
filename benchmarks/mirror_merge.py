"""Benchmark: a Delta mirror updated in place (``MERGE INTO`` with deletion vectors, what the
mirror asset does) against rewriting the whole mirror (what the Parquet layout did).

Generates a keyed mirror of each ``--table-sizes`` size as a Delta table (deletion vectors and
Change Data Feed on, as the mirrors have) and new ranges of ``--changes`` change rows (60 %
update before/after images, 25 % inserts of new keys, 15 % deletes, keys spread over the table),
for each kind of table (``--kinds``): ``plain``, 7 columns of mixed types, ``stored-otherwise``,
the same with a ``time`` column and a name with a space (``item name``), which Delta stores
otherwise (as text, escaped), and ``keyless``, those columns without a key (a multiset mirror;
ranges of at most 1,000 changes, whose before images and deletes are rows the mirror holds).
For each (kind, table, range) it times

- merge: the range, written as a change-log partition (not timed), applied as the mirror asset
  applies it: ``mirror_store.apply``, the function the asset calls, which merges a range of at
  most ``DRIVER_MERGE_ROWS`` rows in the driver (deletion vectors written there; the mean of ten
  ranges, one of which Spark merges because its version is a checkpoint's) and a bigger one by
  Spark's ``MERGE INTO`` with the key condition that lets Delta skip the files no change
  touches; and the bytes it wrote (Delta's operation metrics). The mirror is written as a
  snapshot's rebuild writes it (clustered by key in files of ``key_clustering.ROWS_PER_FILE``
  rows);
- rewrite: ``mirror_merge.rows_after_keyed_changes`` (current table ∪ changes, the last change
  per key wins)
  written whole as a new Delta version, and its bytes.

Prints seconds, bytes and merge/rewrite. Targets, for each kind: 10 changes into 10M rows at
least 20× faster than the rewrite; 100k changes into 1M rows at most 0.2× (the rewrite costs no
more than a recomputation from the snapshot, so the target holds against that too).

    .venv/bin/python benchmarks/mirror_merge.py            # 1M and 10M rows, 10/1k/100k changes
    .venv/bin/python benchmarks/mirror_merge.py --quick    # 100k and 1M rows
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.spark import mirror_store
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.driver_merges import DRIVER_MERGE_ROWS
from cdc_assets.spark.mirror_merge import rows_after_keyed_changes, rows_after_multiset_changes

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
# a SQL Server time(7) column as the source reads it (Spark's time(6)), a second's fraction
# that differs per row and per version
PICKED_AT = """
    CASE WHEN id % 11 = 0 THEN NULL ELSE CAST(concat(lpad(CAST(id % 24 AS STRING), 2, '0'), ':',
         lpad(CAST((id + {v}) % 60 AS STRING), 2, '0'), ':', lpad(CAST(id * 7 % 60 AS STRING), 2,
         '0'), '.', lpad(CAST(id * 7919 % 1000000 AS STRING), 6, '0')) AS TIME(6)) END
         AS `picked at`
"""
PLAIN = "plain"
STORED_OTHERWISE = "stored-otherwise"
KEYLESS = "keyless"  # the stored-otherwise columns, no key: the mirror is a multiset
KINDS = (PLAIN, STORED_OTHERWISE, KEYLESS)
KEYLESS_CHANGES = 1000  # keyless ranges up to this size (their rows must be held: see below)


def data_columns(kind: str, version: int) -> list[str]:
    """The select list of a mirror's columns of ``kind`` at ``version``."""
    columns = [c.strip() for c in _split(DATA.format(v=version))]
    if kind != PLAIN:
        columns = [c.replace(" AS name", " AS `item name`") for c in columns]
        columns.append(PICKED_AT.format(v=version).strip())
    return columns


def column_names(kind: str) -> list[str]:
    plain = ["id", "qty", "price", "name", "created", "active", "payload"]
    return plain if kind == PLAIN else [*plain[:3], "item name", *plain[4:], "picked at"]


def key_columns(kind: str) -> tuple[str, ...]:
    return () if kind == KEYLESS else ("id",)


def _lsn(expr: str) -> str:
    return f"unhex(lpad(hex({expr}), {LSN_WIDTH}, '0'))"


def table_frame(spark: SparkSession, kind: str, rows: int, version: int = 0) -> DataFrame:
    return spark.range(rows).selectExpr(*data_columns(kind, version)).repartition(2)


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


def changes_frame(
    spark: SparkSession, kind: str, count: int, table_rows: int, first_lsn: int, run: int = 0
) -> DataFrame:
    """``count`` change rows with LSNs from ``first_lsn``: 60 % update pairs (3 then 4),
    25 % inserts of new keys, 15 % deletes; one transaction per 10 changes. A keyless
    mirror's before images and deletes must be rows it holds: they are the rows as first
    written, of ids no other ``run`` changes (a block of :data:`KEYLESS_CHANGES` ids per run)."""
    pairs = count * 3 // 10
    inserts = count * 25 // 100
    deletes = count - 2 * pairs - inserts
    version = first_lsn % 7 + 1
    old = 0 if kind == KEYLESS else version  # the version of before images and deletes
    meta = [
        _lsn(f"{first_lsn} + seq DIV 10") + " AS `__$start_lsn`",
        "CAST(NULL AS INT) AS `__$command_id`",
        _lsn("seq") + " AS `__$seqval`",
        "op AS `__$operation`",
        "unhex('7F') AS `__$update_mask`",
    ]
    spread = max(1, table_rows // max(1, pairs + deletes))
    touched = f"(id * {spread}) % {table_rows}"  # keyed: ids spread over the table
    gone_ids = f"(id * {spread} + {spread // 2}) % {table_rows}"
    if kind == KEYLESS:  # ids of this run alone: KEYLESS_CHANGES ids per run
        touched = f"{run * KEYLESS_CHANGES} + id"
        gone_ids = f"{run * KEYLESS_CHANGES + pairs} + id"
    updates = (
        spark.range(pairs)
        .selectExpr(f"{touched} AS id", "id AS n")
        .crossJoin(spark.range(3, 5).selectExpr("CAST(id AS INT) AS op"))
        .selectExpr("id", "op", "n * 2 + op - 3 AS seq")
    )
    new_keys = spark.range(inserts).selectExpr(
        f"{table_rows} + {first_lsn} * 10 + id AS id", "2 AS op", f"{2 * pairs} + id AS seq"
    )
    gone = spark.range(deletes).selectExpr(
        f"{gone_ids} AS id",
        "1 AS op",
        f"{2 * pairs + inserts} + id AS seq",
    )
    parts = (
        (updates.where("op = 3"), old),
        (updates.where("op = 4"), version),
        (new_keys, version),
        (gone, old),
    )
    names = [f"`{c}`" for c in column_names(kind)]
    frames = [f.selectExpr("seq", "op", *data_columns(kind, v)) for f, v in parts]
    every = frames[0]
    for frame in frames[1:]:
        every = every.unionByName(frame)
    return every.selectExpr(*meta, *names)


def make_mirror(
    spark: SparkSession, store: AssetStore, key: list[str], kind: str, rows: int
) -> None:
    """The mirror as a snapshot's rebuild writes it: clustered by key when it is large."""
    frame = table_frame(spark, kind, rows)
    mirror_store.rebuild(
        spark, store, key, frame, {"lsn": "0x" + "0" * 20}, rows, key_columns=key_columns(kind)
    )


def timed_merge(
    spark: SparkSession,
    store: AssetStore,
    key: list[str],
    changes: DataFrame,
    table_rows: int,
    partition: str,
    keys: tuple[str, ...] = ("id",),
) -> tuple[float, int, str]:
    """The changes written as a change-log partition (not timed), then applied as the mirror
    asset applies them (``mirror_store.apply``, with the mirror's ``table_rows``): seconds,
    bytes written (files and deletion vectors) and which path merged (the commit's engine)."""
    change_log = [*key[:-1], key[-1] + "_changes"]
    count = changes.count()
    store.write(spark, changes, change_log, partition, lambda _: {"rows": count}, rows=count)
    ranges = mirror_store.ChangeRanges(tuple(change_log), (partition,), count, keys, None)
    started = time.perf_counter()
    published = mirror_store.apply(
        spark, store, ranges, to=key, properties={"lsn": "0x" + "f" * 20}, mirror_rows=table_rows
    )
    seconds = time.perf_counter() - started
    engine = str(store.history(key, limit=1)[0].get("engineInfo", ""))
    how = "spark" if "Spark" in engine else "driver"
    metrics = published.metrics
    written = metrics.get("numTargetBytesAdded", 0) + _dv_bytes(spark, published)
    return seconds, written, how


def _dv_bytes(spark: SparkSession, published: Any) -> int:
    """Bytes of the deletion vectors the commit added (in the log's add actions)."""
    log = Path(published.uri) / "_delta_log" / f"{published.version:020d}.json"
    total = 0
    for line in log.read_text().splitlines():
        action = json.loads(line)
        dv = (action.get("add") or {}).get("deletionVector")
        if dv and dv.get("storageType") != "i":
            total += int(dv.get("sizeInBytes", 0))
    return total


def timed_rewrite(
    spark: SparkSession, store: AssetStore, key: list[str], changes: DataFrame, keyless: bool
) -> tuple[float, int]:
    """The whole mirror recomputed as current ∪ changes and written as a new version."""
    started = time.perf_counter()
    current = store.read(spark, key, None)
    if keyless:
        merged = rows_after_multiset_changes(current, changes)
    else:
        merged = rows_after_keyed_changes(current, changes, key_columns=["id"])
    merged = merged.coalesce(max(1, spark.sparkContext.defaultParallelism))
    published = store.write(
        spark, merged.localCheckpoint(), [*key[:-1], key[-1] + "_rewrite"], None
    )
    seconds = time.perf_counter() - started
    return seconds, published.metrics.get("numOutputBytes", 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table-sizes", default="1000000,10000000", help="mirror rows")
    parser.add_argument("--changes", default="10,1000,100000", help="new range sizes")
    parser.add_argument("--kinds", default=",".join(KINDS), help="kinds of table (module doc)")
    parser.add_argument("--quick", action="store_true", help="100k and 1M rows")
    args = parser.parse_args(argv)
    table_sizes = [int(x) for x in args.table_sizes.split(",")]
    sizes = [int(x) for x in args.changes.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds {sorted(unknown)}: use {', '.join(KINDS)}")
    if args.quick:
        table_sizes = [100_000, 1_000_000]
    print(machine_line())
    spark, started = _common.spark_session()
    print(f"Spark session started in {started:.1f} s (not counted below)")
    results: dict[tuple[str, int, int], tuple[float, int, float, int]] = {}
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        store = AssetStore(Path(directory))
        print(
            f"{'table':>16}  {'table rows':>11}  {'changes':>8}  {'merge s':>8}  "
            f"{'merge bytes':>12}  {'rewrite s':>9}  {'rewrite bytes':>13}  {'merge/rewrite':>13}"
            "  merged by"
        )
        for table_rows in table_sizes:
            for kind in kinds:
                key = ["mirror", f"{kind}_{table_rows}"]
                t0 = time.perf_counter()
                make_mirror(spark, store, key, kind, table_rows)
                written = time.perf_counter() - t0
                print(f"  ({kind} {table_rows:,}-row mirror written in {written:.1f} s)")
                # warm-up: a table's first merge pays for code generation and its log's state
                keys = key_columns(kind)
                warm = changes_frame(spark, kind, 10, table_rows, 1)
                timed_merge(spark, store, key, warm, table_rows, "warm-up", keys)
                run = 1  # a keyless range's rows are ids no earlier range changed
                for n in sizes:
                    if kind == KEYLESS and n > KEYLESS_CHANGES:
                        continue
                    # a range small enough for the driver is merged ten times (ten versions: one
                    # of them Spark's, which checkpoints): the mean is what a range costs
                    repeats = 10 if n <= 1000 else 3 if n <= DRIVER_MERGE_ROWS else 1
                    runs = []
                    for r in range(repeats):
                        first = 10_000_000 + n + r * 100_000
                        changes = changes_frame(spark, kind, n, table_rows, first, run)
                        changes = changes.localCheckpoint()
                        partition = f"{n}-{r}"
                        runs.append(
                            timed_merge(spark, store, key, changes, table_rows, partition, keys)
                        )
                        run += 1
                    merge_s = sum(r[0] for r in runs) / len(runs)
                    merge_b = sum(r[1] for r in runs) // len(runs)
                    if kind == KEYLESS:  # rows the ranges above did not change
                        changes = changes_frame(spark, kind, n, table_rows, first, run)
                        run += 1
                    rewrite_s, rewrite_b = timed_rewrite(
                        spark, store, key, changes, kind == KEYLESS
                    )
                    results[(kind, table_rows, n)] = (merge_s, merge_b, rewrite_s, rewrite_b)
                    counted = Counter(r[2] for r in runs)
                    hows = ", ".join(f"{k} {v}" for k, v in sorted(counted.items()))
                    spread = [r[0] for r in runs]
                    if len(spread) > 1:
                        hows += f" (min {min(spread):.2f} s, max {max(spread):.2f} s)"
                    print(
                        f"{kind:>16}  {table_rows:>11,}  {n:>8,}  {merge_s:8.2f}  "
                        f"{merge_b:>12,}  {rewrite_s:9.2f}  {rewrite_b:>13,}  "
                        f"{merge_s / rewrite_s:13.3f}  {hows}"
                    )
    for kind in [k for k in kinds if k != KEYLESS]:  # keyless: no target, shown as measured
        for (rows, n), target, what in (
            ((10_000_000, 10), 1 / 20, "10 changes into 10M rows: merge/rewrite <= 0.05 (>= 20x)"),
            ((1_000_000, 100_000), 0.2, "100k changes into 1M rows: merge/rewrite <= 0.2"),
        ):
            if (kind, rows, n) in results:
                merge_s, _, rewrite_s, _ = results[(kind, rows, n)]
                ratio = merge_s / rewrite_s
                verdict = "met" if ratio <= target else "MISSED"
                print(f"target ({kind}) {what}: {ratio:.3f} {verdict}")
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
