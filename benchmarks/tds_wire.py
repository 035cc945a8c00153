"""Benchmark: the SQL Server layer's reads through a real driver over TDS vs the in-process DB-API.

Builds source_read.py's benchmark table (``--rows`` rows, 7 mixed-type columns, all captured, so
the change range holds ``--rows`` inserts), serves it over TDS (``cdc_assets.tds_server``, TLS on)
and times, in the same run, through the emulator's in-process DB-API and through pyodbc +
Microsoft ODBC Driver 18 (the ``odbc:`` path a user configures for SQL Server):

- the exact snapshot (``snapshot.snapshot_table``) of the table,
- the change rows of the whole range (``changes.read_changes``),

each read fully as Arrow record batches, the best of two. The ratio is wire time / in-process
time. With ``--profile`` the wire snapshot runs under cProfile (the client's side; the server's
threads run in this process too, so their Python time is in the same profile).

    .venv/bin/python benchmarks/tds_wire.py                 # 1,000,000 rows
    .venv/bin/python benchmarks/tds_wire.py --rows 20000    # smoke test
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from source_read import TABLE, build

from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver.catalog import discover
from cdc_assets.sqlserver.changes import read_changes
from cdc_assets.sqlserver.connection import ConnectionFactory, OdbcConnectionFactory, OdbcSettings
from cdc_assets.sqlserver.lsn_queries import get_max_lsn
from cdc_assets.sqlserver.odbc_drivers import msodbcsql18_path
from cdc_assets.sqlserver.snapshot import snapshot_table
from cdc_assets.tds_server import TdsServer

PASSWORD_ENV = "CDC_BENCH_TDS_PASSWORD"


def _reads(factory: ConnectionFactory, batch_rows: int) -> dict[str, Callable[[], int]]:
    conn = factory.connect(autocommit=True)
    instance = discover(conn)[("dbo", TABLE)].instances[0]
    assert instance.start_lsn is not None
    max_lsn = get_max_lsn(conn)
    lsn_range = LsnRange(instance.start_lsn.decrement(), max_lsn)

    def snapshot() -> int:
        with snapshot_table(factory, instance, mode="exact", batch_rows=batch_rows) as read:
            return sum(b.num_rows for b in read)

    def changes() -> int:
        return sum(
            b.num_rows for b in read_changes(conn, instance, lsn_range, batch_rows=batch_rows)
        )

    return {"snapshot (exact)": snapshot, "changes (range)": changes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch-rows", type=int, default=50_000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    driver = msodbcsql18_path()
    if driver is None:
        raise SystemExit("Microsoft ODBC Driver 18 (mssql-python-odbc) is missing: make setup")
    with tempfile.TemporaryDirectory(prefix="cdc-tds-bench-") as tmp:
        path = Path(tmp) / "bench.db"
        inserted, captured = build(path, args.rows)
        print(
            f"tds wire benchmark: {args.rows:,} rows built in {inserted:.1f} s, captured in "
            f"{captured:.1f} s"
        )
        os.environ[PASSWORD_ENV] = "bench-Passw0rd"
        with TdsServer(path, logins={"bench": os.environ[PASSWORD_ENV]}) as server:
            odbc = OdbcConnectionFactory(
                OdbcSettings(
                    server="127.0.0.1",
                    port=server.port,
                    database=server.database,
                    user="bench",
                    password_env=PASSWORD_ENV,
                    driver=str(driver),
                    encrypt="yes",
                    trust_server_certificate=True,
                )
            )
            local = EmulatorConnectionFactory(EmulatorSettings(path=path))
            in_process, wire = _reads(local, args.batch_rows), _reads(odbc, args.batch_rows)
            print(
                f"{'read':<20} {'rows':>10} {'in-process s':>13} {'rows/s':>10} "
                f"{'ODBC 18/TDS s':>14} {'rows/s':>10} {'ratio':>6}"
            )
            for label in in_process:
                times = []
                for read in (in_process[label], wire[label]):
                    best = float("inf")
                    for _ in range(2):  # the best of two: the first also warms plan caches
                        started = time.perf_counter()
                        rows = read()
                        best = min(best, time.perf_counter() - started)
                        if rows != args.rows:
                            raise SystemExit(f"{label}: read {rows:,} rows, not {args.rows:,}")
                    times.append(best)
                a, b = times
                print(
                    f"{label:<20} {args.rows:>10,} {a:>13.2f} {args.rows / a:>10,.0f} "
                    f"{b:>14.2f} {args.rows / b:>10,.0f} {b / a:>5.1f}x"
                )
            if args.profile:
                from _common import profiled

                _, text = profiled(wire["snapshot (exact)"], top=20)
                print(text)


if __name__ == "__main__":
    main()
