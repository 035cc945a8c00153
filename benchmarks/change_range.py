"""Benchmark: one LSN range of ``--changes`` change rows over ``--tables`` tables, end to end.

Creates ``--tables`` captured 7-column mixed-type tables in the emulator, then writes to each
``--changes / --tables`` change rows (60 % inserts, 30 % update before/after images, 10 %
deletes, in transactions of at most 1,000 rows) and runs capture. One range ``(lo, hi]`` holds
them all. Times, on one warm local[2] Spark session:

(a) the project: that range partition of the change-log multi-asset materialized for every table
    through the real Dagster definitions (the sync job with all change logs selected, on an
    ``instance_for_test`` instance): per table the change-log store's range write
    (``spark/change_log_store.RangeWrite``: the read of the range, in the driver when small,
    else on an executor, the properties asked of the source after it, one Delta commit) and
    the asset checks;
(b) the raw limit: ``read_changes`` per table in this one process, each written with
    ``pyarrow.parquet.ParquetWriter``;
(c) a naive pipeline: per table ``fetchall`` of the change table's rows in the range,
    ``pandas.DataFrame``, ``spark.createDataFrame``, ``write.parquet``.

Prints rows/s of each and the ratios of rows/s (a)/(b) and (a)/(c).

    .venv/bin/python benchmarks/change_range.py            # 100,000 changes over 10 tables
    .venv/bin/python benchmarks/change_range.py --quick    # 10,000 changes over 10 tables
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
import pyarrow.parquet as pq
from _common import machine_line
from dagster import instance_for_test

from cdc_assets import emulator
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG, step_seconds
from cdc_assets.dagster.sync.names import partitions_name, sync_job_name
from cdc_assets.dagster.sync.source import Source, load_source
from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import discover, get_max_lsn, read_changes
from cdc_assets.sqlserver.catalog import CaptureInstance

TARGET_RAW = 0.8
TARGET_NAIVE = 5.0
PER_TRANSACTION = 1_000


def table_names(count: int) -> list[str]:
    return [f"t{i:03d}" for i in range(count)]


def build(db: Path, tables: list[str], per_table: int) -> float:
    """Captured tables, then ``per_table`` change rows each; returns seconds."""
    started = time.perf_counter()
    conn = emulator.connect(db, autocommit=True)
    try:
        _common.create_tables(conn, tables)
        _common.capture(db)  # establish the capture instances before any change
        inserts = per_table * 6 // 10
        updates = per_table * 3 // 20  # two change rows each
        deletes = per_table - inserts - 2 * updates
        for table in tables:
            _common.insert_rows(conn, table, 0, inserts)
            for lo in range(0, updates, PER_TRANSACTION):
                hi = min(updates, lo + PER_TRANSACTION)
                conn.execute(
                    f"UPDATE [dbo].[{table}] SET [qty] = COALESCE([qty], 0) + 1, [name] = ? "
                    "WHERE [id] >= ? AND [id] < ?",
                    ["updated", lo, hi],
                )
            first = inserts - deletes
            for lo in range(first, inserts, PER_TRANSACTION):
                hi = min(inserts, lo + PER_TRANSACTION)
                conn.execute(f"DELETE FROM [dbo].[{table}] WHERE [id] >= ? AND [id] < ?", [lo, hi])
    finally:
        conn.close()
    _common.capture(db)
    return time.perf_counter() - started


def the_range(db: Path) -> tuple[LsnRange, dict[str, CaptureInstance]]:
    conn = emulator.connect(db, autocommit=True)
    try:
        found = discover(conn)
        instances = {name: t.instances[0] for (_, name), t in found.items()}
        starts = [i.start_lsn for i in instances.values() if i.start_lsn is not None]
        # Every change was made after every instance was established: lo + 1 = the last start.
        return LsnRange(max(starts).decrement(), get_max_lsn(conn)), instances
    finally:
        conn.close()


def project_range(source: Source, defs: Any, lsn_range: LsnRange) -> dict[str, Any]:
    job = defs.resolve_job_def(sync_job_name(source.name))
    with instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_name(source.name), [lsn_range.key])
        started = time.perf_counter()
        result = job.execute_in_process(
            instance=instance,
            partition_key=lsn_range.key,
            asset_selection=[t.change_log_key for t in source.tables],
            run_config=QUIET_RUN_CONFIG,
        )
        seconds = time.perf_counter() - started
        steps = step_seconds(instance, result.run_id)
    rows = sum(
        (source.store.properties(t.change_log_key.path, lsn_range.key) or {}).get("rows", 0)
        for t in source.tables
    )
    return {"seconds": seconds, "steps": steps, "rows": rows}


def raw_range(
    db: Path, instances: dict[str, CaptureInstance], lsn_range: LsnRange, out: Path
) -> int:
    factory = EmulatorConnectionFactory(EmulatorSettings(path=db))
    out.mkdir()
    rows = 0
    conn = factory.connect(autocommit=True)
    try:
        for name, instance in sorted(instances.items()):
            writer: pq.ParquetWriter | None = None
            for batch in read_changes(conn, instance, lsn_range):
                if writer is None:
                    writer = pq.ParquetWriter(out / f"{name}.parquet", batch.schema)
                writer.write_batch(batch)
                rows += batch.num_rows
            if writer is not None:
                writer.close()
    finally:
        conn.close()
    return rows


def naive_range(
    spark: Any, db: Path, instances: dict[str, CaptureInstance], lsn_range: LsnRange, out: Path
) -> int:
    import pandas as pd

    rows = 0
    conn = emulator.connect(db, autocommit=True)
    try:
        for name, instance in sorted(instances.items()):
            cursor = conn.cursor()
            cursor.execute(
                f"SELECT * FROM cdc.[{instance.name}_CT] "
                "WHERE [__$start_lsn] > ? AND [__$start_lsn] <= ?",
                [lsn_range.lo.raw, lsn_range.hi.raw],
            )
            names = [d[0] for d in cursor.description]
            frame = pd.DataFrame.from_records(cursor.fetchall(), columns=names)
            spark.createDataFrame(frame).write.parquet(str(out / name))
            rows += len(frame)
    finally:
        conn.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=100_000, help="change rows (100,000)")
    parser.add_argument("--tables", type=int, default=10, help="tables (10)")
    parser.add_argument("--quick", action="store_true", help="a small run (10,000 changes)")
    parser.add_argument("--profile", action="store_true", help="profile (a) on the driver")
    args = parser.parse_args(argv)
    changes = 10_000 if args.quick else args.changes
    tables = table_names(args.tables)
    per_table = changes // len(tables)
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        workdir = Path(directory)
        db = workdir / "source.db"
        built = build(db, tables, per_table)
        lsn_range, instances = the_range(db)
        print(
            f"change range: {per_table * len(tables):,} change rows over {len(tables)} tables "
            f"({per_table:,} each), range {lsn_range.key}, built in {built:.1f} s, local[2]"
        )
        spark, started = _common.spark_session()
        print(f"Spark session started in {started:.1f} s (not counted below)")
        t0 = time.perf_counter()
        expected = raw_range(db, instances, lsn_range, workdir / "raw")
        raw = time.perf_counter() - t0

        runs = []
        for attempt in ("cold", "warm"):
            config = _common.project_config(workdir / attempt, db)
            source = load_source(config.sources[0], config.storage.base_path)
            defs = build_definitions(config, [source])
            before = _common.spark_job_ids(spark)
            runs.append(project_range(source, defs, lsn_range))
            runs[-1]["jobs"] = (before, _common.spark_job_ids(spark))
            if runs[-1]["rows"] != expected:
                raise SystemExit(f"(a) wrote {runs[-1]['rows']:,} rows, (b) read {expected:,}")
        cold, project = runs

        t0 = time.perf_counter()
        got = naive_range(spark, db, instances, lsn_range, workdir / "naive")
        naive = time.perf_counter() - t0
        assert got == expected, (got, expected)

        lines = [
            ("(a) project: range partition via Dagster, warm", project["seconds"]),
            ("    the same, cold (first Python data source tasks)", cold["seconds"]),
            ("(b) raw: read_changes -> pyarrow Parquet", raw),
            ("(c) naive: fetchall -> pandas -> createDataFrame", naive),
        ]
        _common.print_pipelines(
            spark,
            expected,
            lines,
            cold,
            project,
            (("(b)", TARGET_RAW, raw), ("(c)", TARGET_NAIVE, naive)),
        )
        if args.profile:
            config = _common.project_config(workdir / "profiled", db)
            source = load_source(config.sources[0], config.storage.base_path)
            defs = build_definitions(config, [source])
            _, text = _common.profiled(lambda: project_range(source, defs, lsn_range), top=35)
            print("(a) under cProfile (driver process; executors not included):")
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
