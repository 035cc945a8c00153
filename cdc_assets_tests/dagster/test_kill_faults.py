"""A sync run killed (SIGKILL of the run process) at each stage: writing a change-log partition
to Delta, right after its commit, and inside a mirror's MERGE (:mod:`.kill_runner` describes
each kill point; its "read", a kill while the source is read, is the write's case before the
first write and is not run here).

The run executes in a separate process, started ahead so it has Spark up, against the test's
source database, storage and Dagster instance; the test hands it the sensor's request and it
kills itself at its stage, after the run has completed the first table it reached. Then:

- nothing uncommitted is readable: every table reads, every published partition holds the row
  count its properties (committed with it) record, the partitions the run had not finished are
  not published, and only the tables the run had finished have new commits — a killed MERGE
  leaves the mirror's previous version current;
- the killed run is left ``STARTED`` in the instance and the sensor waits for it; once it is
  marked failed (what the code server does when it finds a run process dead), the sensor
  retries the same range after its pause — no new range, no gap;
- the rerun succeeds: every table's partition holds the same rows with the same values and
  Spark types as the range read straight from the source;
- every mirror equals its source table, all at the range's end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter, instance_for_test
from dagster_shared.serdes import serialize_value
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets import emulator
from cdc_assets.config import parse_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.names import PARTITION_TAG, SOURCE_TAG
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.lsn import LsnRange
from cdc_assets.spark import sqlserver_source
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.partition_rows import PARTITION_COLUMN
from cdc_assets.workload import DEMO_TABLES, create_demo_database

from . import kill_runner
from .conftest import SOURCE, SyncHarness

ROOT = Path(__file__).resolve().parents[2]
NTH = 2  # the second table (change log or mirror) the run reaches: the first one is complete
CHILD_TIMEOUT = 300
# Every stage of the runner but "read": a run killed while it reads the source is the "write"
# case before its first write (nothing published either), and each stage costs a Spark start.
KILLED_AT = tuple(s for s in kill_runner.STAGES if s != "read")
TOKEN_ENV = "CDC_KILL_FAULTS_TOKEN"  # marks the killed run's process tree (JVM, Python workers)


def _config(tmp_path: Path, db: Path) -> dict[str, Any]:
    return {
        "sources": [
            {
                "name": SOURCE,
                "connection": {"emulator": {"path": str(db)}},
                # one table after another: the kill point "the nth table the run reaches, the
                # ones before it complete" needs an order (tables_in_parallel > 1 has none)
                "sync": {"max_transactions_per_range": 10_000, "tables_in_parallel": 1},
                "snapshot": {"mode": "auto"},
            }
        ],
        "storage": {"base_path": str(tmp_path / "storage")},
        "spark": {"master": "local[2]"},
    }


@pytest.fixture
def setup(
    tmp_path: Path, spark: SparkSession
) -> Iterator[tuple[SyncHarness, dict[str, Any], DagsterInstance]]:
    db = tmp_path / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    # three tables: one the run completes before the kill point, the one it dies in, one after
    workload = create_demo_database(
        conn, seed=7, rows_per_table=20, tables=DEMO_TABLES[:3], polling_interval=None
    )
    emulator.scan(db)
    raw = _config(tmp_path, db)
    config = parse_config(raw, base_dir=tmp_path, origin="test config")
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    (tmp_path / "dagster").mkdir()
    with instance_for_test(temp_dir=str(tmp_path / "dagster")) as instance:
        yield SyncHarness(db, source, defs, instance, workload, spark), raw, instance


@dataclass
class KilledRun:
    """A run process started ahead (Spark up), waiting for the request to run and die in."""

    stage: str
    process: subprocess.Popen
    token: str
    go: Path
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _start(
    tmp_path: Path,
    raw: dict[str, Any],
    instance: DagsterInstance,
    stage: str,
    *,
    nth: int = NTH,
    extra: dict[str, Any] | None = None,
) -> KilledRun:
    spec = tmp_path / f"kill-{stage}.json"
    go = tmp_path / f"kill-{stage}.go"
    spec.write_text(
        json.dumps(
            {
                "config": raw,
                "base_dir": str(tmp_path),
                "instance_ref": serialize_value(instance.get_ref()),
                "stage": stage,
                "nth": nth,
                "go": str(go),
                "scratch": str(tmp_path / f"kill-{stage}-warm-up"),
                **(extra or {}),
            }
        )
    )
    token = uuid.uuid4().hex
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, TOKEN_ENV: token}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    log = tmp_path / f"kill-{stage}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cdc_assets_tests.dagster.kill_runner", str(spec)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return KilledRun(stage, process, token, go, log)


def _run_killed(run: KilledRun, request: Any) -> None:
    """Hand the request to the waiting run process; it must die of SIGKILL at its stage. Then
    wait until its whole process tree (the Spark JVM and Python workers too) is gone."""
    temporary = run.go.with_suffix(".tmp")
    temporary.write_text(
        json.dumps({"partition_key": request.partition_key, "tags": dict(request.tags)})
    )
    temporary.replace(run.go)
    try:
        returncode = run.process.wait(timeout=CHILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        run.process.kill()
        run.process.wait()
        raise AssertionError(f"{run.stage}: the run did not end in time:\n{run.tail()}") from None
    assert returncode == -signal.SIGKILL, (
        f"{run.stage}: the run process ended with {returncode}, not SIGKILL:\n{run.tail()}"
    )
    left = _wait_for_tree(run.token)
    assert not left, f"{run.stage}: processes of the killed run alive after 60 s: {left}"


class KilledRuns:
    """Run processes started ahead, at most ``AHEAD`` waiting at a time: each pays Spark's
    start-up while the test works on the stages before it, without crowding the CPUs."""

    AHEAD = 2

    def __init__(self, tmp_path: Path, raw: dict[str, Any], instance: DagsterInstance) -> None:
        self.tmp_path, self.raw, self.instance = tmp_path, raw, instance
        self.pending = list(KILLED_AT)
        self.started: dict[str, KilledRun] = {}
        self.top_up()

    def top_up(self) -> None:
        while self.pending and sum(r.process.poll() is None for r in self.started.values()) < (
            self.AHEAD
        ):
            stage = self.pending.pop(0)
            self.started[stage] = _start(self.tmp_path, self.raw, self.instance, stage)

    def take(self, stage: str) -> KilledRun:
        self.top_up()
        return self.started[stage]

    def close(self) -> None:
        for run in self.started.values():  # a test that failed early leaves some waiting
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()
            _wait_for_tree(run.token)


@pytest.fixture
def killed_runs(
    tmp_path: Path, setup: tuple[SyncHarness, dict[str, Any], DagsterInstance]
) -> Iterator[KilledRuns]:
    _harness, raw, instance = setup
    runs = KilledRuns(tmp_path, raw, instance)
    try:
        yield runs
    finally:
        runs.close()


def _tree(token: str) -> list[int]:
    """Processes whose environment carries ``token`` (the child and everything it started)."""
    marker = f"{TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                status = (entry / "status").read_text()
                if "\nState:\tZ" not in status:
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _wait_for_tree(token: str, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _tree(token)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:  # started by this test: do not leave them behind
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left


def _tables(storage: Path) -> list[list[str]]:
    """The key path of every Delta table under ``storage`` (a test-side look at the files)."""
    return sorted(
        list(log.parent.relative_to(storage).parts) for log in storage.rglob("_delta_log")
    )


def _assert_only_committed_data_readable(
    spark: SparkSession, store: AssetStore, storage: Path, partition: str | None
) -> dict[tuple[str, ...], int]:
    """Every table reads; ``partition`` (the range the killed run wrote), where published, reads
    back with the row count its properties record (the earlier partitions were checked when they
    were the range). Returns each table's number of commits."""
    commits = {}
    for key_path in _tables(storage):
        history = store.history(key_path)
        commits[tuple(key_path)] = len(history)
        if key_path[0] != "cdc":
            store.read(spark, key_path, None).count()  # a mirror: its current version reads
            continue
        if partition is None or partition not in _partitions(spark, store, key_path):
            continue
        properties = store.properties(key_path, partition)
        if properties is not None:  # None: a recorded gap
            rows = store.read(spark, key_path, partition)
            assert rows.count() == properties["rows"], f"{key_path} {partition}: rows differ"
    return commits


def _partitions(spark: SparkSession, store: AssetStore, key_path: list[str]) -> list[str]:
    df = spark.read.format("delta").load(store.location(key_path))
    return [r[0] for r in df.select(PARTITION_COLUMN).distinct().collect()]


def _sorted_rows(df: DataFrame) -> list:
    return df.orderBy(*[F.col(f"`{c}`") for c in df.columns]).collect()


def _latest_run(instance: DagsterInstance):
    runs = instance.get_runs(filters=RunsFilter(tags={SOURCE_TAG: SOURCE}), limit=1)
    assert runs
    return runs[0]


def _kill_and_recover(
    harness: SyncHarness, run: KilledRun, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    stage, instance = run.stage, harness.instance
    source, spark, store = harness.source, harness.spark, harness.source.store
    tables = sorted(source.tables, key=lambda t: t.mirror_key.to_user_string())
    # A range runs only the tables that changed in it: every table changes in each stage's.
    for _ in range(8):
        harness.workload.step()
    harness.workload.touch_every_table()
    harness.capture()
    data = harness.tick()
    (request,) = data.run_requests
    key = request.partition_key
    lsn_range = LsnRange.parse_key(key)
    at_before = {t: mirror_lsn(source, t) for t in tables}
    commits_before = _assert_only_committed_data_readable(spark, store, Path(source.storage), None)

    started = time.monotonic()
    _run_killed(run, request)
    killed_seconds = time.monotonic() - started

    # Nothing half-written is readable, and the run died where the stage says.
    commits = _assert_only_committed_data_readable(spark, store, Path(source.storage), key)
    published = [t for t in tables if store.is_published(t.change_log_key.path, key)]
    moved = [t for t in tables if mirror_lsn(source, t) != at_before[t]]
    held = None
    if stage == "merge":
        assert len(published) == len(tables), f"{stage}: change logs published: {published}"
        assert len(moved) == NTH - 1, f"{stage}: mirrors moved: {moved}"
        assert all(mirror_lsn(source, t) == lsn_range.hi for t in moved)
        killed = tables[NTH - 1].mirror_key.path
        # the killed MERGE made no commit: the mirror's previous version is its current one
        assert commits[tuple(killed)] == commits_before[tuple(killed)], f"{stage}: a commit"
        held = int(store.current_version(killed, None) or -1)
    else:
        expected = NTH if stage == "committed" else NTH - 1
        assert len(published) == expected, f"{stage}: change logs published: {published}"
        assert not moved, f"{stage}: mirrors moved although no change log was complete"
        changed = {k for k, n in commits.items() if n != commits_before.get(k, 0)}
        assert changed == {tuple(t.change_log_key.path) for t in published}, (
            f"{stage}: tables with new commits: {changed}"
        )

    # The killed run stays STARTED: the sensor waits for it, whatever the storage says.
    killed = _latest_run(instance)
    assert killed.status == DagsterRunStatus.STARTED, killed.status
    waiting = harness.tick()
    assert not waiting.run_requests and "in progress" in (waiting.skip_message or "")

    # What the code server does when it finds a run process dead.
    instance.report_engine_event(
        f"Run execution process for {killed.run_id} was terminated by signal 9 (SIGKILL).",
        killed,
    )
    instance.report_run_failed(killed)
    paused = harness.tick()
    assert not paused.run_requests and "retrying after" in (paused.skip_message or "")
    keys_before = set(instance.get_dynamic_partitions(f"{SOURCE}_lsn"))
    with monkeypatch.context() as patch:
        patch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
        retry = harness.tick()
    (rerun,) = retry.run_requests
    assert rerun.partition_key == key and rerun.tags[PARTITION_TAG] == key
    assert set(instance.get_dynamic_partitions(f"{SOURCE}_lsn")) == keys_before

    started = time.monotonic()
    result = harness.execute(rerun)
    rerun_seconds = time.monotonic() - started
    assert result.success, f"{stage}: the rerun failed"
    assert not harness.tick().run_requests, f"{stage}: the sensor still has work after the rerun"
    _assert_only_committed_data_readable(spark, store, Path(source.storage), key)

    # The rerun's partitions: the range's rows as the source gives them, same types.
    settings = source.config.connection_settings()
    for table in tables:
        written = store.read(spark, table.change_log_key.path, key)
        expected_df = sqlserver_source.read_change_range(spark, settings, table.instance, lsn_range)
        assert written.schema == expected_df.schema, f"{stage}: {table.qualified_name} schema"
        assert _sorted_rows(written) == _sorted_rows(expected_df), (
            f"{stage}: {table.qualified_name}: the rerun wrote other rows than the range holds"
        )
        properties = store.properties(table.change_log_key.path, key) or {}
        assert properties.get("coverage", {}).get("ok"), properties
    at = harness.assert_mirrors_equal_source()
    assert at == lsn_range.hi
    return {
        "stage": stage,
        "killed_seconds": round(killed_seconds, 1),
        "rerun_seconds": round(rerun_seconds, 1),
        # merge: the mirror version current when the MERGE was killed still reads (time travel)
        "held_version_reads": (
            store.read(spark, tables[NTH - 1].mirror_key.path, None, version=held).count() >= 0
            if held is not None
            else None
        ),
    }


def test_a_run_killed_at_each_stage_reruns_to_the_same_data(
    setup: tuple[SyncHarness, dict[str, Any], DagsterInstance],
    killed_runs: KilledRuns,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One source, one chain: after the snapshot and a first range, each stage kills the run of
    a new range in a process started ahead; the test checks what is readable, recovers like the
    daemon and checks the rerun (module doc)."""
    harness = setup[0]
    assert harness.sync() == 1  # the snapshot
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    assert harness.sync() == 1  # a first range: the mirrors exist
    harness.assert_mirrors_equal_source()
    for stage in KILLED_AT:
        report = _kill_and_recover(harness, killed_runs.take(stage), monkeypatch)
        killed_runs.top_up()  # the next one starts while this stage is checked
        print(report, flush=True)


def test_a_reader_keeps_the_version_it_resolved(tmp_path: Path, spark: SparkSession) -> None:
    """Later commits (a rerun, the next range) do not take away the version a reader holds."""
    store = AssetStore(tmp_path)
    held = store.write(spark, spark.range(3), ["asset"], None)  # what a reader resolved
    store.write(spark, spark.range(5), ["asset"], None)
    store.write(spark, spark.range(7), ["asset"], None)
    assert store.read(spark, ["asset"], None, version=held.version).count() == 3
    assert store.read(spark, ["asset"], None).count() == 7
