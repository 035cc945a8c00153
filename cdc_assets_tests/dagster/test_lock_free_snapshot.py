"""Lock-free snapshots (DBLog's watermarks) on a database without snapshot isolation, under a
concurrent random workload: every mirror equals its source table at the mirror's LSN, at every
LSN a mirror reached, not only once the writes stop.

The key chunks are read without a transaction or a table lock while a second connection commits
random multi-table transactions (inserts, updates, key updates, delete and re-insert, rollbacks)
and capture stands still (the max LSN lags the log by the whole snapshot). Ranges are small, so
the first ranges after the snapshot end inside the LSNs its chunks were read across: a snapshot
whose high watermark trailed its reads (the max LSN) would build a mirror at such a range's end
holding rows from after it. The reference for "the source at LSN x" is the final table with the
changes after x undone in reverse order (their before images), in plain Python.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import snapshot_chunks
from cdc_assets.sqlserver import get_max_lsn, read_changes
from cdc_assets.workload import Workload, small_tables
from cdc_assets_tests.support.outside_spark import read_with_duckdb

from .conftest import SyncHarness, assert_succeeded, make_harness

COLUMNS = ("id", "name", "qty")
DELETE, INSERT, BEFORE = 1, 2, 3


def _state_at(final: dict[int, tuple], changes: list[dict[str, Any]], lsn: Lsn) -> Counter:
    """The table at ``lsn``: ``final`` with the changes after ``lsn`` undone, newest first."""
    state = dict(final)
    for change in reversed([c for c in changes if c["__$start_lsn"] > lsn.raw]):
        row = tuple(change[c] for c in COLUMNS)
        operation = change["__$operation"]
        if operation == INSERT:
            del state[row[0]]
        elif operation in (DELETE, BEFORE):  # a delete's row, an update's before image
            state[row[0]] = row
    return Counter(state.values())


def _mirrors(harness: SyncHarness, seen: list[tuple[str, Lsn, Counter]]) -> None:
    """Where each mirror is and what it holds now (read by DuckDB, outside Spark)."""
    for table in harness.source.tables:
        at = mirror_lsn(harness.source, table)
        if at is None:
            continue
        location = harness.source.store.location(table.mirror_key.path)
        seen.append((table.name, at, Counter(read_with_duckdb(location, COLUMNS))))


@pytest.mark.parametrize("seed", [3, 17, 29])
def test_lock_free_snapshot_under_a_concurrent_workload(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
) -> None:
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        seed=seed,
        rows=120,
        tables=small_tables(2),
        max_transactions=8,
        chunk_rows=40,  # 3 chunks a table, 2 per commit
        chunks_per_commit=2,
    )
    conn = emulator.connect(str(harness.db), autocommit=True)
    conn.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION OFF")
    writer = Workload(conn, seed=seed + 1000, tables=harness.workload.tables)
    failures: list[BaseException] = []
    rng = random.Random(seed)
    turns: queue.Queue[int | None] = queue.Queue()

    def write() -> None:
        """Transactions on demand, a few tens of milliseconds apart."""
        try:
            while (count := turns.get()) is not None:
                for _ in range(count):
                    writer.step()
                    time.sleep(rng.uniform(0.01, 0.06))
        except BaseException as exc:  # surfaced in the test thread
            failures.append(exc)

    real = snapshot_chunks.append_chunks

    def while_writing(*args: Any, **kwargs: Any) -> Any:
        turns.put(6)  # the writer commits while this batch's chunks are read
        return real(*args, **kwargs)

    seen: list[tuple[str, Lsn, Counter]] = []
    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        request = harness.tick().run_requests[0]
        assert request.partition_key == SNAPSHOT_PARTITION
        with monkeypatch.context() as patch:
            patch.setattr(snapshot_chunks, "append_chunks", while_writing)
            assert_succeeded(harness.execute(request))
        for _ in range(3):  # ranges while it still writes
            turns.put(5)
            harness.capture()
            data = harness.tick()
            if data.run_requests:
                assert_succeeded(harness.execute(data.run_requests[0]))
                _mirrors(harness, seen)
    finally:
        turns.put(None)
        thread.join(timeout=120)
        conn.close()
    assert not failures, failures
    assert writer.stats.transactions > 20
    harness.capture()
    for _ in range(30):  # the rest, range by range
        data = harness.tick()
        if not data.run_requests:
            break
        assert_succeeded(harness.execute(data.run_requests[0]))
        _mirrors(harness, seen)
    else:
        pytest.fail("the sensor still requests runs")

    source = emulator.connect(str(harness.db), autocommit=True)
    try:
        maximum = get_max_lsn(source)
        for table in harness.source.tables:
            final = {
                row[0]: tuple(row)
                for row in source.execute(f"SELECT id, name, qty FROM [dbo].[{table.name}]")
            }
            states = [(at, rows) for name, at, rows in seen if name == table.name]
            assert states and states[-1][0] == maximum, (table.name, [s[0] for s in states])
            low = min(at for at, _ in states)
            changes = (
                [
                    row
                    for batch in read_changes(source, table.instance, LsnRange(low, maximum))
                    for row in batch.to_pylist()
                ]
                if low < maximum
                else []
            )
            for at, rows in states:
                expected = _state_at(final, changes, at)
                assert rows == expected, (
                    f"{table.name} at {at.hex}: only in the mirror {list(rows - expected)[:3]}, "
                    f"only in the source {list(expected - rows)[:3]}"
                )
    finally:
        source.close()
    # read without snapshot isolation, each chunk between its own watermarks
    for table in harness.source.tables:
        snapshot = harness.source.store.properties(table.change_log_key.path, SNAPSHOT_PARTITION)
        assert snapshot is not None and snapshot["mode"] == "fuzzy"
        assert Lsn.parse(snapshot["replay_from"]) < Lsn.parse(snapshot["snapshot_lsn"])
