"""Benchmark (issue 53): the incremental ``daily_orders`` after one changed order, against a full
recompute of the aggregate, in the same run.

It writes an ``orders`` mirror of N rows (1M by default, 10M with ``--large``) as a snapshot's
rebuild writes it (clustered by ``order_id``; ``ordered_at`` grows with ``order_id``, about 2,900
orders a day, as a shop's orders do), materializes the example asset ``daily_orders`` through
the project's definitions (a first run: the whole mirror, with Spark), then, ``--repeat`` times,
changes one order (a one-update range applied by ``mirror_store.apply``, as the sync applies it)
and materializes ``daily_orders`` again: an incremental run (the mirror's change data feed since
the version consumed, the changed day recomputed from the mirror). Then the full recompute again
in a fresh Dagster instance (nothing consumed: the whole mirror). Both are the step's time as
Dagster records it (loading the input, the body, writing the output) and the run's time
(in-process ``materialize``); the aggregate is checked against Spark's full aggregate.
Target: the incremental step >= 10x faster than the full one at 1M rows.

    .venv/bin/python benchmarks/incremental_daily_orders.py            # 1M rows
    .venv/bin/python benchmarks/incremental_daily_orders.py --large    # 10M rows
    .venv/bin/python benchmarks/incremental_daily_orders.py --quick    # 20k rows (smoke)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from dagster import AssetSelection, DagsterInstance, instance_for_test, materialize

from cdc_assets import emulator
from cdc_assets.dagster.daily_totals import daily_totals
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG, step_seconds
from cdc_assets.dagster.examples import daily_orders_key
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.lsn import Lsn
from cdc_assets.spark import mirror_store
from cdc_assets.workload import DEMO_TABLES, create_demo_database

TARGET_RATIO = 10.0
ORDERS_PER_DAY = 2_880  # ordered_at advances 30 s per order
MIRROR_COLUMNS = [
    "CAST(id + 1 AS BIGINT) AS order_id",
    "CAST((id * 7919) % 50000 AS INT) AS customer_id",
    "CAST('shipped' AS STRING) AS status",
    "CAST(timestamp_ntz'2020-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id * 30) "
    "AS TIMESTAMP_NTZ) AS ordered_at",
    "CAST((id % 100000) / 100.0 + 1 AS DECIMAL(19, 4)) AS total",
]


def _lsn(n: int) -> Lsn:
    return Lsn(n.to_bytes(10, "big"))


def _one_update(spark: Any, order_id: int, n: int) -> Any:
    """A change log range holding one update of ``order_id``'s total (before and after image)."""
    lsn = f"unhex('{_lsn(n).raw.hex()}')"
    base = spark.range(order_id - 1, order_id).selectExpr(*MIRROR_COLUMNS)
    images = []
    for op, total in ((3, "total"), (4, f"CAST(total + {n} AS DECIMAL(19, 4))")):
        images.append(
            base.selectExpr(
                f"{lsn} AS `__$start_lsn`",
                "CAST(NULL AS INT) AS `__$command_id`",
                f"unhex('{op:020x}') AS `__$seqval`",
                f"{op} AS `__$operation`",
                "unhex('FF') AS `__$update_mask`",
                "order_id",
                "customer_id",
                "status",
                "ordered_at",
                f"{total} AS total",
            )
        )
    return images[0].unionByName(images[1])


def _materialize(defs: Any, instance: DagsterInstance) -> tuple[float, float]:
    """``daily_orders`` materialized: (its step's seconds, the run's)."""
    key = daily_orders_key("bench")
    started = time.perf_counter()
    result = materialize(
        list(defs.assets or []),
        instance=instance,
        resources=dict(defs.resources or {}),
        selection=AssetSelection.assets(key),
        run_config=QUIET_RUN_CONFIG,
    )
    run = time.perf_counter() - started
    assert result.success
    return sum(step_seconds(instance, result.run_id).values()), run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the orders mirror")
    parser.add_argument("--large", action="store_true", help="10M rows")
    parser.add_argument("--quick", action="store_true", help="20k rows (a smoke run)")
    parser.add_argument("--repeat", type=int, default=3, help="incremental and full runs each")
    args = parser.parse_args(argv)
    rows = 20_000 if args.quick else 10_000_000 if args.large else args.rows
    print(machine_line())
    spark, _ = _common.spark_session()
    with tempfile.TemporaryDirectory(prefix="cdc_bench_") as tmp:
        workdir = Path(tmp)
        db = workdir / "source.db"
        conn = emulator.connect(db, autocommit=True)
        orders_table = next(t for t in DEMO_TABLES if t.name == "orders")
        create_demo_database(conn, seed=0, rows_per_table=5, tables=(orders_table,))
        conn.close()
        emulator.scan(db)
        config = _common.project_config(workdir, db).model_copy(
            update={"examples": ("daily_orders",)}
        )
        source = load_source(config.sources[0], config.storage.base_path)
        defs = build_definitions(config, [source])
        (table,) = source.tables
        store = source.store
        started = time.perf_counter()
        frame = spark.range(rows).selectExpr(*MIRROR_COLUMNS)
        properties = {"lsn": _lsn(1).hex, "snapshot_version": "bench"}
        mirror_store.rebuild(
            spark, store, table.mirror_key.path, frame, properties, rows, key_columns=("order_id",)
        )
        print(f"orders mirror: {rows:,} rows written in {time.perf_counter() - started:.1f} s")

        full_steps, full_runs, inc_steps, inc_runs = [], [], [], []
        with instance_for_test() as instance:
            step, run = _materialize(defs, instance)
            print(f"first run (whole mirror): step {step:.2f} s, run {run:.2f} s")
            for n in range(2, args.repeat + 2):
                order_id = 1 + (n * 104_729) % rows
                change_log = table.change_log_key.path
                partition = f"{_lsn(n - 1).raw.hex()}-{_lsn(n).raw.hex()}"
                store.write(spark, _one_update(spark, order_id, n), change_log, partition)
                ranges = mirror_store.ChangeRanges(
                    tuple(change_log), (partition,), 2, ("order_id",), None
                )
                mirror_store.apply(
                    spark,
                    store,
                    ranges,
                    to=table.mirror_key.path,
                    properties={"lsn": _lsn(n).hex, "snapshot_version": "bench"},
                    mirror_rows=rows,
                )
                step, run = _materialize(defs, instance)
                inc_steps.append(step)
                inc_runs.append(run)
                print(
                    f"incremental run, order {order_id} changed: step {step:.2f} s, run {run:.2f} s"
                )
        for _ in range(args.repeat):
            with instance_for_test() as fresh:  # nothing consumed: the whole mirror
                step, run = _materialize(defs, fresh)
            full_steps.append(step)
            full_runs.append(run)
            print(f"full recompute: step {step:.2f} s, run {run:.2f} s")
        written = store.read(spark, daily_orders_key("bench").path, None)
        expected = daily_totals(store.read(spark, table.mirror_key.path, None))
        assert written.exceptAll(expected).count() == 0 and expected.exceptAll(written).count() == 0
    full_step, inc_step = statistics.median(full_steps), statistics.median(inc_steps)
    full_run, inc_run = statistics.median(full_runs), statistics.median(inc_runs)
    ratio = full_step / inc_step if inc_step else float("inf")
    print(
        f"daily_orders over {rows:,} orders, one changed order (medians of {args.repeat}): "
        f"incremental step {inc_step:.2f} s vs full recompute {full_step:.2f} s: {ratio:.1f}x "
        f"(target >= {TARGET_RATIO:g}x); whole runs {inc_run:.2f} s vs {full_run:.2f} s: "
        f"{full_run / inc_run:.1f}x; the aggregate equals Spark's full aggregate"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
