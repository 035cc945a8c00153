"""Benchmark: the ``snapshot`` partition end to end, against the raw limit and a naive pipeline.

Builds one 7-column mixed-type table of ``--rows`` rows in the emulator (loaded before CDC is
enabled, so capture has nothing to copy), then times, on one warm local[2] Spark session:

(a) the project: the ``snapshot`` partition of the table's change log materialized through the real
    Dagster definitions (``build_definitions``, the sync job with the change log selected, on an
    ``instance_for_test`` instance; ``snapshot.chunk_rows`` = ``--chunk-rows``): the key ranges read
    by Spark tasks through the Python data source, held once (localCheckpoint), its properties
    computed and written to the change log's Delta table in one commit with them;
(b) the raw limit: ``cdc_assets.sqlserver.snapshot_table`` in this one process into Arrow record
    batches, written with ``pyarrow.parquet.ParquetWriter``;
(c) a naive pipeline: ``fetchall`` from an emulator connection, ``pandas.DataFrame``,
    ``spark.createDataFrame(pandas_df)``, ``write.parquet``.

Prints rows/s of each and the ratios of rows/s (a)/(b) (target >= 0.8) and (a)/(c) (target >= 5).
``--profile`` runs (a) once more under cProfile and prints the driver's profile.

    .venv/bin/python benchmarks/snapshot_end_to_end.py             # 1,000,000 rows
    .venv/bin/python benchmarks/snapshot_end_to_end.py --quick     # 50,000 rows
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common
import pyarrow as pa
import pyarrow.parquet as pq
from _common import machine_line
from snapshot_run import run_snapshot

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.sqlserver.snapshot import snapshot_table

TABLE = "bench"
TARGET_RAW = 0.8
TARGET_NAIVE = 5.0


def project_snapshot(workdir: Path, db: Path, chunk_rows: int, rows: int) -> dict[str, Any]:
    """(a): one run of the sync job for the ``snapshot`` partition; seconds and step times."""
    config = _common.project_config(workdir, db, chunk_rows=chunk_rows)
    run = run_snapshot(config)
    if not run.success:
        raise SystemExit("(a) the snapshot run failed")
    if run.published.get("rows") != rows:
        raise SystemExit(f"(a) published {run.published.get('rows')} rows, expected {rows:,}")
    seconds, steps = run.seconds, run.steps
    return {"seconds": seconds, "steps": steps, "storage": config.storage.base_path}


def raw_snapshot(db: Path, out: Path, batch_rows: int) -> int:
    """(b): snapshot_table -> Arrow batches -> ParquetWriter, one process."""
    from cdc_assets.sqlserver.catalog import discover

    factory = EmulatorConnectionFactory(EmulatorSettings(path=db))
    conn = factory.connect(autocommit=True)
    try:
        instance = discover(conn)[("dbo", TABLE)].instances[0]
    finally:
        conn.close()
    rows = 0
    with snapshot_table(factory, instance, mode="exact", batch_rows=batch_rows) as read:
        writer: pq.ParquetWriter | None = None
        for batch in read:
            if writer is None:
                writer = pq.ParquetWriter(out, batch.schema)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
    return rows


def naive_snapshot(spark: Any, db: Path, out: Path) -> int:
    """(c): fetchall -> pandas -> createDataFrame -> write.parquet."""
    import pandas as pd

    conn = emulator.connect(db, autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute(f"SELECT * FROM [dbo].[{TABLE}]")
        names = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    finally:
        conn.close()
    frame = pd.DataFrame.from_records(rows, columns=names)
    spark.createDataFrame(frame).write.parquet(str(out))
    return len(frame)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="a small run (50,000 rows)")
    parser.add_argument(
        "--chunk-rows", type=int, default=250_000, help="snapshot.chunk_rows (250,000)"
    )
    parser.add_argument("--batch-rows", type=int, default=10_000, help="Arrow batch rows (b)")
    parser.add_argument("--profile", action="store_true", help="profile (a) on the driver")
    args = parser.parse_args(argv)
    rows = 50_000 if args.quick else args.rows
    chunk_rows = min(args.chunk_rows, max(1, rows // 4)) if args.quick else args.chunk_rows
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        workdir = Path(directory)
        db = workdir / "source.db"
        built = _common.build_wide_table(db, rows, TABLE)
        print(
            f"snapshot end to end: {rows:,} rows x {len(_common.COLUMNS)} columns, built in "
            f"{built:.1f} s; chunk_rows {chunk_rows:,} ({key_ranges(db, chunk_rows)} key "
            "ranges, one Spark task each), local[2]"
        )
        spark, started = _common.spark_session()
        print(f"Spark session started in {started:.1f} s (not counted below)")

        t0 = time.perf_counter()
        got = raw_snapshot(db, workdir / "raw.parquet", args.batch_rows)
        raw = time.perf_counter() - t0
        assert got == rows, got

        runs = []
        for attempt in ("cold", "warm"):
            before = _common.spark_job_ids(spark)
            runs.append(project_snapshot(workdir / attempt, db, chunk_rows, rows))
            runs[-1]["jobs"] = (before, _common.spark_job_ids(spark))
        cold, project = runs

        t0 = time.perf_counter()
        got = naive_snapshot(spark, db, workdir / "naive")
        naive = time.perf_counter() - t0
        assert got == rows, got

        lines = [
            ("(a) project: snapshot partition via Dagster, warm", project["seconds"]),
            ("    the same, cold (first Python data source tasks)", cold["seconds"]),
            ("(b) raw: snapshot_table -> Arrow -> pyarrow Parquet", raw),
            ("(c) naive: fetchall -> pandas -> createDataFrame", naive),
        ]
        _common.print_pipelines(
            spark,
            rows,
            lines,
            cold,
            project,
            (("(b)", TARGET_RAW, raw), ("(c)", TARGET_NAIVE, naive)),
        )
        if args.profile:
            _, text = _common.profiled(
                lambda: project_snapshot(workdir / "profiled", db, chunk_rows, rows), top=30
            )
            print("(a) warm, under cProfile (driver process; executors not included):")
            print(text)
            _, text = _common.profiled(lambda: one_task(db, chunk_rows), top=30, sort="tottime")
            print(
                f"one executor task (key range 1 of {key_ranges(db, chunk_rows)}) run in this "
                "process under cProfile, by own time:"
            )
            print(text)
    return 0


def key_ranges(db: Path, chunk_rows: int) -> int:
    from cdc_assets.sqlserver.catalog import discover
    from cdc_assets.sqlserver.chunks import plan_key_ranges

    conn = EmulatorConnectionFactory(EmulatorSettings(path=db)).connect(autocommit=True)
    try:
        return len(plan_key_ranges(conn, discover(conn)[("dbo", TABLE)].instances[0], chunk_rows))
    finally:
        conn.close()


def one_task(db: Path, chunk_rows: int) -> int:
    """What one Spark task of (a) does, run here: the data source's read of the first key range."""
    from cdc_assets.spark import sqlserver_source as src
    from cdc_assets.sqlserver.catalog import discover
    from cdc_assets.sqlserver.chunks import plan_key_ranges
    from cdc_assets.sqlserver.snapshot import snapshot_schema

    settings = EmulatorSettings(path=db)
    conn = EmulatorConnectionFactory(settings).connect(autocommit=True)
    try:
        instance = discover(conn)[("dbo", TABLE)].instances[0]
        ranges = tuple(plan_key_ranges(conn, instance, chunk_rows))
    finally:
        conn.close()
    fields = [*snapshot_schema(instance).schema]
    fields += [pa.field(c, pa.binary()) for c in src.SNAPSHOT_COLUMNS]
    plan = src.ReadPlan(settings, instance, pa.schema(fields), 10_000, key_ranges=ranges)
    reader = src._Reader(plan, src._spark_schema(plan.arrow_schema))
    return sum(b.num_rows for b in reader.read(reader.partitions()[0]))


if __name__ == "__main__":
    sys.exit(main())
