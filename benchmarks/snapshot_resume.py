"""Benchmark: a big snapshot killed at ~70 % and resumed; a lock-free snapshot under writes.

(1) Resume. One 7-column table of ``--rows`` rows (10,000,000; ``--quick`` 200,000), its
    ``snapshot`` partition materialized by the project's sync job (``snapshot.chunk_rows``
    ``--chunk-rows``, a batch of chunks per commit, as many as Spark's cores) in a child process
    with its own Spark, as a run process is. Once the change log's committed progress reaches
    ``--kill-at`` (0.7) of the table, the child's whole process group is SIGKILLed; a second
    child resumes the snapshot to its end. Each child counts every table row its Spark tasks
    read from the source (a reader of this script's, counting each Arrow batch as it is read,
    also the part of a chunk read when the kill came). Prints rows read by each child and in
    all against the table's rows (target <= 1.35), and their seconds.
(2) Lock-free. A table of ``--lock-free-rows`` rows (1,000,000; ``--quick`` 100,000) snapshotted
    while a writer commits ``--tps`` (50) transactions per second on it (updates, inserts,
    deletes), once exact (snapshot isolation on: a brief table lock and a SNAPSHOT transaction
    per chunk) and once lock-free (snapshot isolation off: DBLog's watermarks per chunk), in this
    process on one warm local[2] Spark session. Prints rows/s of both and the ratio lock-free /
    exact (target >= 0.5). Then the writes stop, the sync sensor's ranges bring the lock-free
    snapshot's mirror to the max LSN and the mirror is compared with the table, row for row.

    .venv/bin/python benchmarks/snapshot_resume.py            # 10,000,000 and 1,000,000 rows
    .venv/bin/python benchmarks/snapshot_resume.py --quick    # 200,000 and 100,000 rows
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import _common
from _common import machine_line, rate

from cdc_assets import emulator

TABLE = "bench"
TARGET_READ = 1.35
TARGET_LOCK_FREE = 0.5
HERE = Path(__file__).resolve()


# -- the child: one snapshot run, counting what its tasks read ---------------------------------


def _counting_load(counts: str) -> None:
    """Snapshot reads of this process count their table rows into the file ``counts`` (a line
    per Arrow batch, written as it is read)."""
    from cdc_assets.spark import sqlserver_source

    class CountingReader(sqlserver_source._Reader):
        def _snapshot(self, key_range):  # type: ignore[no-untyped-def]
            with open(counts, "a") as out:
                for batch in super()._snapshot(key_range):
                    rows = batch.column(sqlserver_source.SNAPSHOT_LSN).null_count
                    out.write(f"{rows}\n")
                    out.flush()
                    yield batch

    class CountingSource(sqlserver_source.SqlServerDataSource):
        @classmethod
        def name(cls) -> str:
            return "cdc_sqlserver_bench_counting"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return CountingReader(self._plan(), schema)

    real_load = sqlserver_source._load

    def load(spark, plan, source=None):  # type: ignore[no-untyped-def]
        return real_load(spark, plan, CountingSource if plan.lsn_range is None else source)

    sqlserver_source._load = load


def child(spec_path: str) -> int:
    from snapshot_run import run_snapshot

    spec = json.loads(Path(spec_path).read_text())
    _counting_load(spec["counts"])
    workdir = Path(spec["workdir"])
    config = _common.project_config(workdir, Path(spec["db"]), chunk_rows=spec["chunk_rows"])
    _common.spark_session()
    (workdir / "dagster").mkdir(exist_ok=True)
    run = run_snapshot(
        config,
        instance_dir=str(workdir / "dagster"),
        before_run=lambda: Path(spec["ready"]).touch(),
    )
    Path(spec["done"]).write_text(json.dumps({"success": run.success, "seconds": run.seconds}))
    return 0 if run.success else 1


# -- (1) killed at ~70 % and resumed -----------------------------------------------------------


def _start_child(workdir: Path, db: Path, chunk_rows: int, name: str) -> tuple[Any, dict]:
    spec = {
        "workdir": str(workdir),
        "db": str(db),
        "chunk_rows": chunk_rows,
        "counts": str(workdir / f"counts-{name}.txt"),
        "ready": str(workdir / f"ready-{name}"),
        "done": str(workdir / f"done-{name}.json"),
    }
    path = workdir / f"spec-{name}.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    log = open(workdir / f"child-{name}.log", "wb")  # noqa: SIM115 (the child writes to it)
    process = subprocess.Popen(
        [sys.executable, str(HERE), "--child", str(path)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the JVM and Python workers die with it
    )
    return process, spec


def _rows_read(spec: dict) -> int:
    path = Path(spec["counts"])
    return sum(int(n) for n in path.read_text().split()) if path.exists() else 0


def resume(workdir: Path, rows: int, chunk_rows: int, kill_at: float) -> dict[str, Any]:
    from cdc_assets.spark.asset_store import AssetStore

    workdir.mkdir(parents=True)
    db = workdir / "resume.db"
    built = _common.build_wide_table(db, rows, TABLE)
    print(f"(1) {rows:,} rows x {len(_common.COLUMNS)} columns built in {built:.1f} s")
    store = AssetStore(workdir / "storage")
    path = ["cdc", "bench", "dbo", f"{TABLE}_changes"]

    first, spec1 = _start_child(workdir, db, chunk_rows, "killed")
    started = time.perf_counter()
    killed_at = None
    seen: list[tuple[int, float]] = []  # (commit_seq, when it was first seen)
    while first.poll() is None:
        written = store.written_properties(path, "snapshot") if store.delta_table(path) else None
        seq = (written or {}).get("commit_seq")
        if seq is not None and (not seen or seen[-1][0] != seq):
            seen.append((int(seq), time.perf_counter()))
        done = int((written or {}).get("rows") or 0)
        if written and written.get("in_progress") and done >= kill_at * rows:
            # half way through the next batch: its chunks partly read, nothing of it committed
            interval = seen[-1][1] - seen[-2][1] if len(seen) > 1 else 0.0
            time.sleep(interval / 2)
            os.killpg(first.pid, signal.SIGKILL)  # the run process and everything it started
            killed_at = int((store.written_properties(path, "snapshot") or {}).get("rows") or 0)
            break
        time.sleep(0.2)
    first.wait()
    killed_seconds = time.perf_counter() - started
    if killed_at is None:
        raise SystemExit(f"(1) the first run ended before {kill_at:.0%} (exit {first.returncode})")
    time.sleep(2)  # the worker processes of the killed group are gone

    second, spec2 = _start_child(workdir, db, chunk_rows, "resumed")
    started = time.perf_counter()
    if second.wait() != 0:
        raise SystemExit(f"(1) the resumed run failed: see {workdir}/child-resumed.log")
    resumed_seconds = time.perf_counter() - started
    final = store.properties(path, "snapshot") or {}
    if final.get("rows") != rows or final.get("resumes") != 1:
        raise SystemExit(f"(1) the finished snapshot is not the table: {final}")
    read1, read2 = _rows_read(spec1), _rows_read(spec2)
    return {
        "rows": rows,
        "committed_at_kill": killed_at,
        "read_killed": read1,
        "read_resumed": read2,
        "killed_seconds": killed_seconds,
        "resumed_seconds": resumed_seconds,
        "run_seconds": json.loads(Path(spec2["done"]).read_text())["seconds"],
        "chunks": final.get("chunks_done"),
        "commits": final.get("commit_seq", 0) + 1,
    }


# -- (2) lock-free under a workload ------------------------------------------------------------


class Writer(threading.Thread):
    """``tps`` transactions per second on the bench table: updates, inserts, deletes."""

    def __init__(self, db: Path, rows: int, tps: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.db, self.rows, self.tps, self.seed = db, rows, tps, seed
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.committed = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        conn = emulator.connect(self.db, autocommit=True)
        next_id = self.rows + 1_000_000 * (1 + self.seed)  # new keys of its own
        names = _common.column_list()
        marks = ", ".join(["?"] * len(_common.COLUMNS))
        started = time.perf_counter()
        try:
            while not self.stop.is_set():
                conn.execute("BEGIN TRAN")
                for _ in range(self.rng.randint(1, 3)):
                    choice = self.rng.random()
                    key = self.rng.randrange(self.rows)
                    if choice < 0.6:
                        conn.execute(
                            f"UPDATE [dbo].[{TABLE}] SET [qty] = ?, [name] = ? WHERE [id] = ?",
                            self.rng.randrange(1000),
                            f"updated {self.committed}",
                            key,
                        )
                    elif choice < 0.85:
                        conn.execute(
                            f"INSERT INTO [dbo].[{TABLE}] ({names}) VALUES ({marks})",
                            list(_common.wide_row(next_id)),
                        )
                        next_id += 1
                    else:
                        conn.execute(f"DELETE FROM [dbo].[{TABLE}] WHERE [id] = ?", key)
                conn.execute("COMMIT")
                self.committed += 1
                pause = started + self.committed / self.tps - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
        except BaseException as exc:
            self.error = exc
        finally:
            conn.close()


def _snapshot_seconds(
    workdir: Path, db: Path, chunk_rows: int, mode: str
) -> tuple[Any, Any, float]:
    """One snapshot run of the bench table through the sync job (``mode`` as configured);
    returns the source, definitions and the run's seconds."""
    from snapshot_run import run_snapshot

    from cdc_assets.config import parse_config

    config = parse_config(
        {
            "sources": [
                {
                    "name": "bench",
                    "connection": {"emulator": {"path": str(db)}},
                    "sync": {"max_transactions_per_range": 100_000},
                    "snapshot": {"mode": mode, "chunk_rows": chunk_rows},
                }
            ],
            "storage": {"base_path": str(workdir / "storage")},
            "spark": {"master": "local[2]", "conf": _common.SPARK_CONF},
        },
        base_dir=workdir,
        origin="benchmark config",
    )
    (workdir / "dagster").mkdir(parents=True, exist_ok=True)
    run = run_snapshot(config, instance_dir=tempfile.mkdtemp(dir=workdir / "dagster"))
    assert run.success
    return run.source, run.defs, run.seconds


def lock_free(workdir: Path, rows: int, chunk_rows: int, tps: float) -> dict[str, Any]:
    from dagster import instance_for_test

    from cdc_assets.dagster.demo.in_process import execute_request, tick_sensor
    from cdc_assets.dagster.mirror import mirror_lsn
    from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, sync_job_name
    from cdc_assets.spark import sqlserver_source
    from cdc_assets.sqlserver import get_max_lsn

    workdir.mkdir(parents=True)
    db = workdir / "lock_free.db"
    built = _common.build_wide_table(db, rows, TABLE)
    print(f"(2) {rows:,} rows built in {built:.1f} s; writer at {tps:g} transactions/s")
    spark, _ = _common.spark_session()
    conn = emulator.connect(db, autocommit=True)
    # warm-up: the first Python data source tasks of a session are slow
    _snapshot_seconds(workdir / "warm", db, chunk_rows, "exact")
    measured: dict[str, float] = {}
    source = defs = None
    for seed, (mode, isolation) in enumerate((("exact", "ON"), ("fuzzy", "OFF"))):
        conn.execute(f"ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION {isolation}")
        writer = Writer(db, rows, tps, seed)
        writer.start()
        try:
            source, defs, measured[mode] = _snapshot_seconds(workdir / mode, db, chunk_rows, mode)
        finally:
            if mode == "exact":
                writer.stop.set()
                writer.join()
        if writer.error is not None:
            raise writer.error
        if mode == "exact":
            continue
        # the lock-free snapshot's mirror: the writer goes on a little, then stops
        time.sleep(2)
        writer.stop.set()
        writer.join()
        measured["transactions"] = writer.committed
    conn.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
    _common.capture(db)
    assert source is not None and defs is not None
    table = source.tables[0]
    started = time.perf_counter()
    (workdir / "sensor").mkdir()
    with instance_for_test(temp_dir=str(workdir / "sensor")) as instance:
        job = defs.resolve_job_def(sync_job_name(source.name))
        for _ in range(20):
            data = tick_sensor(defs, instance, source.name)
            if not data.run_requests:
                break
            request = data.run_requests[0]
            if request.partition_key == SNAPSHOT_PARTITION:
                raise SystemExit("(2) the sensor asks for the snapshot again")
            assert execute_request(job, instance, request).success
    synced = time.perf_counter() - started
    at = mirror_lsn(source, table)
    maximum = get_max_lsn(conn)
    conn.close()
    mirror = source.store.read(spark, table.mirror_key.path, None)
    settings = source.config.connection_settings()
    current = sqlserver_source.drop_snapshot_columns(
        sqlserver_source.read_snapshot(spark, settings, table.instance, mode="exact")
    ).select(*mirror.columns)
    extra = mirror.exceptAll(current).count()
    missing = current.exceptAll(mirror).count()
    return {
        "rows": rows,
        "exact": measured["exact"],
        "lock_free": measured["fuzzy"],
        "transactions": int(measured["transactions"]),
        "mirror_rows": mirror.count(),
        "equal": extra == 0 and missing == 0 and at == maximum,
        "mirror_lsn": at.hex if at else None,
        "differ": (extra, missing),
        "sync_seconds": synced,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="(1) rows (10,000,000)")
    parser.add_argument("--lock-free-rows", type=int, default=1_000_000, help="(2) rows")
    parser.add_argument("--quick", action="store_true", help="200,000 and 100,000 rows")
    parser.add_argument("--chunk-rows", type=int, default=250_000, help="snapshot.chunk_rows")
    parser.add_argument("--kill-at", type=float, default=0.7, help="(1) kill at this share")
    parser.add_argument("--tps", type=float, default=50.0, help="(2) writer transactions/s")
    parser.add_argument("--only", choices=("resume", "lock-free"), help="one of the two")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    rows = 200_000 if args.quick else args.rows
    lock_free_rows = 100_000 if args.quick else args.lock_free_rows
    chunk_rows = min(args.chunk_rows, max(1, rows // 20)) if args.quick else args.chunk_rows
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        workdir = Path(directory)
        if args.only in (None, "resume"):
            r = resume(workdir / "resume", rows, chunk_rows, args.kill_at)
            total = r["read_killed"] + r["read_resumed"]
            ratio = total / r["rows"]
            print(
                f"(1) snapshot of {r['rows']:,} rows in {r['chunks']} chunks of ~{chunk_rows:,} "
                f"rows, {r['commits']} commits; killed with {r['committed_at_kill']:,} rows "
                f"committed ({r['committed_at_kill'] / r['rows']:.0%}) after "
                f"{r['killed_seconds']:.1f} s"
            )
            print(
                f"    rows read: killed run {r['read_killed']:,}, resumed run "
                f"{r['read_resumed']:,} ({r['resumed_seconds']:.1f} s, the run "
                f"{r['run_seconds']:.1f} s, {rate(r['read_resumed'], r['run_seconds'])} rows/s)"
            )
            print(
                f"    rows read in all / table rows: {ratio:.3f} (target <= {TARGET_READ}) "
                f"{'met' if ratio <= TARGET_READ else 'MISSED'}"
            )
        if args.only in (None, "lock-free"):
            lf_chunk = min(args.chunk_rows, max(1, lock_free_rows // 8))
            r = lock_free(workdir / "lock_free", lock_free_rows, lf_chunk, args.tps)
            ratio = r["exact"] / r["lock_free"]
            print(
                f"(2) {r['rows']:,} rows, chunk_rows {lf_chunk:,}, "
                f"{r['transactions']:,} writer transactions during the lock-free run"
            )
            print(
                f"    exact (snapshot isolation, lock per chunk): {r['exact']:.1f} s, "
                f"{rate(r['rows'], r['exact'])} rows/s"
            )
            print(
                f"    lock-free (watermarks per chunk):           {r['lock_free']:.1f} s, "
                f"{rate(r['rows'], r['lock_free'])} rows/s"
            )
            print(
                f"    lock-free / exact rows/s: {ratio:.2f} (target >= {TARGET_LOCK_FREE}) "
                f"{'met' if ratio >= TARGET_LOCK_FREE else 'MISSED'}"
            )
            print(
                f"    mirror after the ranges ({r['sync_seconds']:.1f} s): {r['mirror_rows']:,} "
                f"rows at {r['mirror_lsn']}, equal to the source at that LSN: "
                f"{'yes' if r['equal'] else 'NO ' + str(r['differ'])}"
            )
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
