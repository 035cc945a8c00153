"""Benchmark: the sync sensor's tick and the definitions' load time against the number of tables.

For 1, 100 and 1,000 captured tables (small, empty, CDC enabled in the emulator) it times

- definitions load: ``load_source`` (discovery), ``build_definitions``, the repository's
  resolution (``Definitions.get_repository_def()``) and its snapshot (``RepositorySnap.from_def``,
  what a code server serializes for the webserver and daemon) — target <= 5 s at 1,000 tables;
- sensor ticks on an ``instance_for_test`` instance, through ``sync_sensor.evaluate`` and through a
  real ``sensor.evaluate_tick(build_sensor_context(...))``, in three states:

  - ``no snapshots``: a fresh source; the tick requests the ``snapshot`` run;
  - ``idle``: every table has a published snapshot, the chain's last range is published for every
    table and every mirror is at its end, and the max LSN has not moved;
  - ``new range``: the same, after one more captured transaction: the tick plans the next range.

  The published state is written as the IO manager leaves it (Delta commits with the
  properties, no rows; with delta-rs, without Spark, since only the properties are read by the
  sensor), and the source's sync state as the runs' steps leave it. Statements sent to the
  source are counted by wrapping the emulator's
  ``Cursor.execute`` in this process. Target: <= 1 s per tick at 1,000 tables.

``--profile`` prints cProfile of the ticks at the largest table count; ``--cache DIR`` keeps the
built databases there for the next run.

    .venv/bin/python benchmarks/sensor_tick.py            # 1, 100, 1000 tables
    .venv/bin/python benchmarks/sensor_tick.py --quick    # 1, 10, 100 tables
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common
from _common import machine_line
from dagster import DagsterInstance, instance_for_test

from cdc_assets import emulator
from cdc_assets.dagster import sync_sensor
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import evaluate_sensor
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, partitions_name, sensor_name
from cdc_assets.dagster.sync.source import Source, load_source
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.emulator import dbapi as emulator_dbapi
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.records import MirrorPosition
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.delta_location import delta_rs_uri
from cdc_assets.spark.mirror_versions import position_properties
from cdc_assets.spark.partition_rows import PARTITION_COLUMN, PROPERTIES_COLUMN, WRITE_ID
from cdc_assets.sqlserver import get_max_lsn

TARGET_TICK = 1.0
TARGET_LOAD = 5.0
REPEAT = 5


class StatementCounter:
    """Counts the statements this process sends through emulator cursors (and what they are)."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.connections = 0

    @contextmanager
    def counting(self) -> Iterator[StatementCounter]:
        execute, connect = emulator_dbapi.Cursor.execute, emulator_dbapi.Connection.__init__
        counter = self

        def counted_execute(cursor: Any, sql: str, *params: Any) -> Any:
            counter.statements[" ".join(sql.split())[:60]] += 1
            return execute(cursor, sql, *params)

        def counted_init(conn: Any, *args: Any, **kwargs: Any) -> None:
            counter.connections += 1
            connect(conn, *args, **kwargs)

        emulator_dbapi.Cursor.execute = counted_execute  # type: ignore[method-assign]
        emulator_dbapi.Connection.__init__ = counted_init  # type: ignore[method-assign]
        try:
            yield self
        finally:
            emulator_dbapi.Cursor.execute = execute  # type: ignore[method-assign]
            emulator_dbapi.Connection.__init__ = connect  # type: ignore[method-assign]

    @property
    def total(self) -> int:
        return sum(self.statements.values())


def build_source_db(db: Path, count: int) -> float:
    started = time.perf_counter()
    conn = emulator.connect(db, autocommit=True)
    try:
        _common.create_tables(conn, [f"t{i:04d}" for i in range(count)])
    finally:
        conn.close()
    _common.capture(db)
    return time.perf_counter() - started


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file, so copying the file copies everything."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def one_transaction(db: Path) -> Lsn:
    """One captured insert into the first table; the max LSN after capture."""
    conn = emulator.connect(db, autocommit=True)
    try:
        last = conn.execute("SELECT MAX([id]) FROM [dbo].[t0000]").fetchone()[0]
        key = 0 if last is None else last + 1
        _common.insert_rows(conn, "t0000", key, key + 1)
    finally:
        conn.close()
    _common.capture(db)
    return max_lsn(db)


def max_lsn(db: Path) -> Lsn:
    conn = emulator.connect(db, autocommit=True)
    try:
        return get_max_lsn(conn)
    finally:
        conn.close()


def publish(
    store: AssetStore, key_path: list[str], partition: str | None, properties: dict
) -> None:
    """A commit as AssetStore.write leaves it (properties only, no rows), written with delta-rs
    so that the benchmark needs no Spark."""
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake

    text = json.dumps(properties, sort_keys=True)
    uri = delta_rs_uri(store.location(key_path))
    if partition is None:
        data = pa.table({"id": pa.array([], pa.int32())})
        mode = "overwrite"
        extra: dict[str, Any] = {}
    else:
        data = pa.table(
            {
                PARTITION_COLUMN: [partition],
                PROPERTIES_COLUMN: [text],
                "id": pa.array([None], pa.int32()),
            }
        )
        mode = "overwrite"
        extra = {"predicate": f"{PARTITION_COLUMN} = '{partition}'"}
    write_deltalake(
        uri,
        data,
        mode=mode,
        commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
        **extra,
    )


def publish_chain(source: Source, snapshot_lsn: Lsn, end: Lsn) -> str:
    """Snapshot at ``snapshot_lsn``, range (snapshot_lsn, end] and mirrors at ``end``, for every
    table; returns the range key."""
    store = source.store
    lsn_range = LsnRange(snapshot_lsn, end)
    snap_version = "bench-snapshot"
    for table in source.tables:
        publish(
            store,
            table.change_log_key.path,
            SNAPSHOT_PARTITION,
            {
                "kind": SNAPSHOT_PARTITION,
                "capture_instance": table.instance.name,
                "mode": "exact",
                "replay_from": snapshot_lsn.hex,
                "snapshot_lsn": snapshot_lsn.hex,
                "rows": 0,
                WRITE_ID: snap_version,
            },
        )
        publish(
            store,
            table.change_log_key.path,
            lsn_range.key,
            {
                "kind": "range",
                "lo": lsn_range.lo.hex,
                "hi": lsn_range.hi.hex,
                "rows": 0,
                "coverage": {"ok": True, "reason": ""},
                WRITE_ID: "bench-range",
            },
        )
        publish(
            store,
            table.mirror_key.path,
            None,
            {
                "kind": "mirror",
                **position_properties(MirrorPosition(end, snap_version, rows=0)),
                "snapshot_lsn": snapshot_lsn.hex,
                "replay_from": snapshot_lsn.hex,
            },
        )
    # the source's sync state, as the runs' steps leave it: the sensor reads it in one go
    sync = SourceSync.load(source)
    sync.write(None, {t: sync[t] for t in sync.missing})
    return lsn_range.key


def measure(fn: Callable[[], Any]) -> tuple[Any, float, int, int]:
    """Median seconds of ``REPEAT`` calls, and the statements/connections of one call."""
    counter = StatementCounter()
    with counter.counting():
        result = fn()
    times = []
    for _ in range(REPEAT):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return result, statistics.median(times), counter.total, counter.connections


def describe(tick: sync_sensor.Tick) -> str:
    if tick.run_request is not None:
        new = f", adds {tick.new_partition}" if tick.new_partition else ""
        return f"run {tick.run_request.partition_key}{new}"
    return f"skip: {(tick.skip_reason or '')[:50]}"


def run_size(count: int, workdir: Path, profile: bool, cache: Path | None) -> dict[str, Any]:
    db = workdir / "source.db"
    cached = cache / f"sensor_tick_{count}_tables.db" if cache is not None else None
    if cached is not None and cached.exists():
        shutil.copyfile(cached, db)
        built = 0.0
    else:
        built = build_source_db(db, count)
        if cached is not None:
            checkpoint(db)
            cache.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(db, cached)
    config = _common.project_config(workdir, db)
    load: dict[str, float] = {}
    with _common.timed(load, "discover"):
        source = load_source(config.sources[0], config.storage.base_path)
    with _common.timed(load, "build"):
        defs = build_definitions(config, [source])
    with _common.timed(load, "resolve"):
        repository = defs.get_repository_def()
    with _common.timed(load, "snapshot"):
        # What a code server sends the webserver and daemon on load (internal API).
        from dagster._core.remote_representation.external_data import RepositorySnap

        RepositorySnap.from_def(repository)
    assert len(source.tables) == count, len(source.tables)
    defs.resolve_sensor_def(sensor_name(source.name))  # resolved before any tick is timed
    partitions = defs.resolve_job_def(f"{source.name}_sync").partitions_def
    rows: list[tuple[str, str, float, int, int, str]] = []
    profiles: dict[str, str] = {}
    with instance_for_test() as instance:

        def direct() -> sync_sensor.Tick:
            return sync_sensor.evaluate(instance, source, partitions)

        def real() -> Any:
            return evaluate_sensor(defs, instance, source.name)

        def tick_rows(state: str) -> None:
            tick, seconds, statements, connections = measure(direct)
            rows.append((state, "evaluate()", seconds, statements, connections, describe(tick)))
            data, seconds, statements, connections = measure(real)
            outcome = f"{len(data.run_requests or [])} run request(s)"
            rows.append((state, "evaluate_tick()", seconds, statements, connections, outcome))
            if profile:
                _, profiles[state] = _common.profiled(real, top=25)

        tick_rows("no snapshots")
        snapshot_lsn = max_lsn(db)
        end = one_transaction(db)
        key = publish_chain(source, snapshot_lsn, end)
        add_partitions(instance, source, [SNAPSHOT_PARTITION, key])
        tick_rows("idle")
        one_transaction(db)
        tick_rows("new range")
    return {"built": built, "load": load, "rows": rows, "profiles": profiles}


def add_partitions(instance: DagsterInstance, source: Source, keys: list[str]) -> None:
    instance.add_dynamic_partitions(partitions_name(source.name), keys)


def old_chain(count: int) -> list[str]:
    """``count`` contiguous range keys below any LSN the emulator assigns (an old chain)."""
    return [
        LsnRange(Lsn.from_parts(0, i + 1, 0), Lsn.from_parts(0, i + 2, 0)).key for i in range(count)
    ]


def run_partitions(keys: list[int], tables: int, workdir: Path) -> list[tuple[int, str, float]]:
    """The idle and new-range ticks of a source with ``tables`` tables when ``k`` range
    partitions exist already, for each ``k`` of ``keys`` (issue 17: O(1) in the partitions)."""
    rows: list[tuple[int, str, float]] = []
    for count in keys:
        directory = workdir / f"partitions_{count}"
        directory.mkdir()
        db = directory / "source.db"
        build_source_db(db, tables)
        config = _common.project_config(directory, db)
        source = load_source(config.sources[0], config.storage.base_path)
        defs = build_definitions(config, [source])
        partitions = defs.resolve_job_def(f"{source.name}_sync").partitions_def
        with instance_for_test() as instance:
            old = old_chain(count)
            for start in range(0, len(old), 10_000):
                add_partitions(instance, source, old[start : start + 10_000])
            snapshot_lsn = max_lsn(db)
            end = one_transaction(db)
            add_partitions(
                instance, source, [SNAPSHOT_PARTITION, publish_chain(source, snapshot_lsn, end)]
            )

            tick = functools.partial(sync_sensor.evaluate, instance, source, partitions)
            for state in ("idle", "new range"):
                if state == "new range":
                    one_transaction(db)
                _, seconds, _, _ = measure(tick)
                rows.append((count, state, seconds))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", default="1,100,1000", help="table counts (1,100,1000)")
    parser.add_argument("--quick", action="store_true", help="1, 10 and 100 tables")
    parser.add_argument("--profile", action="store_true", help="profile the largest size's ticks")
    parser.add_argument(
        "--partitions",
        default="10,100000",
        help="existing range partitions for the partition-count ticks (10,100000; '' skips)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        help="keep the built emulator databases here and reuse them",
    )
    args = parser.parse_args(argv)
    counts = [1, 10, 100] if args.quick else [int(x) for x in args.tables.split(",")]
    print(machine_line())
    print(f"sensor tick: {', '.join(map(str, counts))} captured tables; median of {REPEAT} ticks")
    results = {}
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
            results[count] = run_size(
                count, Path(directory), args.profile and count == counts[-1], args.cache
            )
        r = results[count]
        load = r["load"]
        print(
            f"\n{count} tables (emulator database built in {r['built']:.1f} s, 0 if cached): "
            "definitions load "
            f"{sum(load.values()):.2f} s = discover {load['discover']:.2f} + build_definitions "
            f"{load['build']:.2f} + get_repository_def {load['resolve']:.2f} + "
            f"RepositorySnap {load['snapshot']:.2f}"
        )
        print(f"  {'state':<13} {'call':<16} {'s/tick':>7} {'queries':>7} {'conns':>5}  outcome")
        for state, call, seconds, statements, connections, outcome in r["rows"]:
            print(
                f"  {state:<13} {call:<16} {seconds:7.3f} {statements:7d} {connections:5d}  "
                f"{outcome}"
            )
    largest = results[counts[-1]]
    worst = max(seconds for _, _, seconds, _, _, _ in largest["rows"])
    load = sum(largest["load"].values())
    print(
        f"\nat {counts[-1]} tables: slowest tick {worst:.3f} s (target <= {TARGET_TICK} s) "
        f"{'met' if worst <= TARGET_TICK else 'MISSED'}; definitions load {load:.2f} s "
        f"(target <= {TARGET_LOAD} s) {'met' if load <= TARGET_LOAD else 'MISSED'}"
    )
    counts_keys = [int(x) for x in args.partitions.split(",") if x]
    if counts_keys:
        with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
            by_keys = run_partitions(counts_keys, 10, Path(directory))
        print(f"\nsensor tick against existing range partitions (10 tables; median of {REPEAT}):")
        print(f"  {'partitions':>10} {'state':<10} {'s/tick':>7}")
        for keys, state, seconds in by_keys:
            print(f"  {keys:>10} {state:<10} {seconds:7.3f}")
        most = max(counts_keys)
        worst = max(seconds for keys, _, seconds in by_keys if keys == most)
        least = max(seconds for keys, _, seconds in by_keys if keys == min(counts_keys))
        print(
            f"with {most} existing range partitions: slowest tick {worst:.3f} s (target <= "
            f"{TARGET_TICK} s) {'met' if worst <= TARGET_TICK else 'MISSED'}; "
            f"{worst / least:.2f}x the tick at {min(counts_keys)}"
        )
    for state, text in largest["profiles"].items():
        print(f"\nevaluate_tick() at {counts[-1]} tables, state '{state}', under cProfile:")
        print(text)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
