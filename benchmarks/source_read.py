"""Benchmark: rows/s of snapshot and change reads through the SQL Server layer.

Builds a CDC-enabled emulator database in a temporary directory (one 7-column mixed-type table,
``--rows`` rows inserted with multi-row INSERTs in large transactions, then captured), and times

- the exact snapshot (``cdc_assets.sqlserver.snapshot.snapshot_table``) of the table,
- the change rows of the whole range from the change table (``changes.read_changes``),
- the same range through ``cdc.fn_cdc_get_all_changes_<ci>`` (``changes.read_function_changes``),

each read fully as Arrow record batches, against a plain ``sqlite3`` read (``SELECT *`` of the
SQLite table behind it, fetched fully: ``"dbo.bench"`` and ``"cdc.dbo_bench_CT"`` — the emulator
stores ``[schema].[name]`` as the SQLite table ``"schema.name"``). The ratio says how many times
the layer is slower than the raw SQLite read of the same rows.

    .venv/bin/python benchmarks/source_read.py                # 1,000,000 rows
    .venv/bin/python benchmarks/source_read.py --rows 20000   # smoke test
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa
from _common import COLUMNS, capture, create_tables, insert_rows

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver.catalog import CaptureInstance, discover
from cdc_assets.sqlserver.changes import read_changes, read_function_changes
from cdc_assets.sqlserver.lsn_queries import get_max_lsn
from cdc_assets.sqlserver.snapshot import snapshot_table

TABLE = "bench"


def build(path: Path, rows: int) -> tuple[float, float]:
    """Create, fill and capture the benchmark table; returns (insert seconds, capture seconds)."""
    conn = emulator.connect(path, autocommit=True)
    try:
        create_tables(conn, [TABLE])
        started = time.perf_counter()
        insert_rows(conn, TABLE, 0, rows)
        inserted = time.perf_counter() - started
    finally:
        conn.close()
    started = time.perf_counter()
    capture(path)
    return inserted, time.perf_counter() - started


def _count(batches: Iterable[pa.RecordBatch]) -> int:
    return sum(batch.num_rows for batch in batches)


def _timed(read: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    rows = read()
    return rows, time.perf_counter() - started


def _sqlite_read(path: Path, table: str) -> int:
    db = sqlite3.connect(path)
    try:
        return len(db.execute(f'SELECT * FROM "{table}"').fetchall())
    finally:
        db.close()


def _format_rate(rows: int, seconds: float) -> str:
    return f"{rows / seconds:,.0f}" if seconds > 0 else "-"


def run(rows: int, batch_rows: int, directory: Path) -> list[tuple[str, int, float, int, float]]:
    path = directory / "bench.db"
    print(
        f"source read benchmark: {rows:,} rows, {len(COLUMNS)} columns "
        f"({', '.join(decl.split(' ')[0] for _, decl in COLUMNS)}), Arrow batches of "
        f"{batch_rows:,} rows"
    )
    inserted, captured = build(path, rows)
    print(
        f"built in {inserted:.1f} s ({_format_rate(rows, inserted)} rows/s inserted through "
        f"T-SQL), captured in {captured:.1f} s"
    )
    factory = EmulatorConnectionFactory(EmulatorSettings(path=path))
    conn = factory.connect(autocommit=True)
    try:
        instance: CaptureInstance = discover(conn)[("dbo", TABLE)].instances[0]
        assert instance.start_lsn is not None
        max_lsn = get_max_lsn(conn)
        lsn_range = LsnRange(instance.start_lsn.decrement(), max_lsn)

        def snapshot() -> int:
            with snapshot_table(factory, instance, mode="exact", batch_rows=batch_rows) as read:
                return _count(read)

        def changes() -> int:
            return _count(read_changes(conn, instance, lsn_range, batch_rows=batch_rows))

        def function_changes() -> int:
            return _count(read_function_changes(conn, instance, lsn_range, batch_rows=batch_rows))

        source_table = f"dbo.{TABLE}"
        change_table = f"cdc.{instance.name}_CT"
        cases: Sequence[tuple[str, Callable[[], int], str]] = (
            ("snapshot (exact)", snapshot, source_table),
            ("changes (change table)", changes, change_table),
            ("changes (fn_cdc_get_all_changes)", function_changes, change_table),
        )
        results = []
        for label, read, table in cases:
            got, seconds = _timed(read)
            if got != rows:
                raise SystemExit(f"{label}: read {got:,} rows, expected {rows:,}")
            base_rows, base_seconds = _timed(lambda table=table: _sqlite_read(path, table))
            results.append((label, got, seconds, base_rows, base_seconds))
    finally:
        conn.close()
    return results


def print_table(results: Sequence[tuple[str, int, float, int, float]]) -> None:
    headers = ("read", "rows", "seconds", "rows/s", "sqlite3 s", "sqlite3 rows/s", "ratio")
    lines = [
        (
            label,
            f"{rows:,}",
            f"{seconds:.2f}",
            _format_rate(rows, seconds),
            f"{base_seconds:.2f}",
            _format_rate(base_rows, base_seconds),
            f"{seconds / base_seconds:.1f}x" if base_seconds > 0 else "-",
        )
        for label, rows, seconds, base_rows, base_seconds in results
    ]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    for line in (headers, *lines):
        cells = [
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        print("  ".join(cells))
    print("ratio: seconds through the SQL Server layer / seconds of the plain sqlite3 read")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows (default 1,000,000)")
    parser.add_argument(
        "--batch-rows", type=int, default=10_000, help="rows per Arrow record batch (10,000)"
    )
    parser.add_argument("--keep", type=Path, help="build the database in this directory")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.batch_rows < 1:
        parser.error("--rows and --batch-rows must be at least 1")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        print_table(run(args.rows, args.batch_rows, args.keep))
        return 0
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        print_table(run(args.rows, args.batch_rows, Path(directory)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
