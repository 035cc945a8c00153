"""A real sync setup per test: an emulated source, the project's definitions built from a config,
a Dagster instance from ``instance_for_test``, and helpers that tick the real sensor and execute
the runs it requests."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetSelection,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
    RunRequest,
    instance_for_test,
    materialize,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData
from pyspark.sql import DataFrame, SparkSession

from cdc_assets import emulator
from cdc_assets.config import MaintenancePolicy, ProjectConfig, parse_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import (
    QUIET_RUN_CONFIG,
    evaluate_sensor,
    execute_request,
    tick_sensor,
)
from cdc_assets.dagster.mirror import mirror_lsn, mirror_position
from cdc_assets.dagster.sync.names import sync_job_name
from cdc_assets.dagster.sync.source import CapturedTable, Source, load_source
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import sqlserver_source
from cdc_assets.spark.stored_columns import encode_for_delta
from cdc_assets.workload import DEMO_TABLES, TableDef, Workload, create_demo_database
from cdc_assets_tests.support.outside_spark import multiset, read_with_duckdb

SOURCE = "shop"
QUIET = QUIET_RUN_CONFIG


@dataclass
class SyncHarness:
    """The source database, its definitions and a Dagster instance, driven step by step."""

    db: Path
    source: Source
    defs: Definitions
    instance: DagsterInstance
    workload: Workload
    spark: SparkSession
    cursor: str | None = None
    results: list[ExecuteInProcessResult] = field(default_factory=list)
    config: ProjectConfig | None = None

    def reload(self) -> None:
        """The code location loaded again: the source's captured tables discovered anew."""
        assert self.config is not None
        self.source = load_source(self.source.config, self.config.storage.base_path)
        self.defs = build_definitions(self.config, [self.source])

    @property
    def job_name(self) -> str:
        return sync_job_name(SOURCE)

    def capture(self) -> None:
        """Run capture scans until everything committed is in the change tables."""
        while emulator.scan(self.db) > 0:
            pass

    def write(self, statement: str) -> None:
        """Run one statement on the source (its own transaction), then capture it."""
        conn = emulator.connect(str(self.db), autocommit=True)
        try:
            conn.execute(statement)
        finally:
            conn.close()
        self.capture()

    def tick(self) -> SensorExecutionData:
        """One evaluation of the real sensor on the real instance; partition requests applied."""
        data = tick_sensor(self.defs, self.instance, SOURCE, self.cursor)
        self.cursor = data.cursor
        return data

    def evaluate(self) -> SensorExecutionData:
        """One evaluation of the real sensor from the current cursor (which it leaves alone)."""
        return evaluate_sensor(self.defs, self.instance, SOURCE, self.cursor)

    def execute(self, request: RunRequest) -> ExecuteInProcessResult:
        """The run ``request`` asks for, as the daemon launches it."""
        result = execute_request(self.defs.resolve_job_def(self.job_name), self.instance, request)
        self.results.append(result)
        return result

    def sync(self, *, limit: int = 50) -> int:
        """Tick and execute until the sensor has nothing to do; the number of runs."""
        runs = 0
        for _ in range(limit):
            data = self.tick()
            if not data.run_requests:
                return runs
            for request in data.run_requests:  # a snapshot run and a range run go side by side
                result = self.execute(request)
                assert_succeeded(result)
                runs += 1
        raise AssertionError(f"the sensor still requests runs after {limit} runs")

    def next_range(self, steps: int = 4) -> LsnRange:
        """``steps`` workload transactions, one tick that adds a range, its run; the range."""
        for _ in range(steps):
            self.workload.step()
        self.capture()
        data = self.tick()
        assert len(data.run_requests) == 1, data.skip_message
        result = self.execute(data.run_requests[0])
        assert_succeeded(result)
        return LsnRange.parse_key(data.run_requests[0].partition_key or "")

    def sync_racing_writes(
        self, *, rounds: int, steps: int, seed: int, max_pause: float = 0.1
    ) -> Workload:
        """``rounds`` times: a second connection writes ``steps`` random workload transactions
        (up to ``max_pause`` s apart) while the sensor ticks and the run it asks for executes.
        Returns that workload: its stats say what was written."""
        conn = emulator.connect(str(self.db), autocommit=True)
        workload = Workload(conn, seed=seed, tables=self.workload.tables)
        rng = random.Random(seed)

        def write() -> None:
            for _ in range(steps):
                workload.step()
                time.sleep(rng.uniform(0, max_pause))

        try:
            for _ in range(rounds):
                writer = threading.Thread(target=write, daemon=True)
                writer.start()
                self.capture()
                data = self.tick()
                if data.run_requests:
                    result = self.execute(data.run_requests[0])
                    assert_succeeded(result)
                writer.join()
        finally:
            conn.close()
        return workload

    def run_checks(self, selection: AssetSelection) -> ExecuteInProcessResult:
        """Execute only the selected asset checks (what the UI's "Execute checks" does)."""
        return materialize(
            [*(self.defs.assets or []), *(self.defs.asset_checks or [])],
            instance=self.instance,
            resources=dict(self.defs.resources or {}),
            run_config=QUIET,
            selection=selection,
            raise_on_error=False,
        )

    def mirror(self, table: CapturedTable) -> DataFrame:
        columns = [f"`{c}`" for c in table.instance.column_names]
        return self.source.store.read(self.spark, table.mirror_key.path, None).select(*columns)

    def source_rows(self, table: CapturedTable) -> DataFrame:
        """The source table's rows now, as Spark's snapshot read gives them (its data source's
        reader, its types), read here in the driver: a local relation, no Spark job to read it
        (a test compares them with the mirrors many times)."""
        settings = self.source.config.connection_settings()
        plan = sqlserver_source.plan_snapshot(settings, table.instance, mode="exact")
        read = sqlserver_source.read_snapshot_in_driver(plan)
        snapshot = self.spark.createDataFrame(
            sqlserver_source.snapshot_rows_in_driver(read),
            sqlserver_source.snapshot_frame_schema(plan),
        )
        columns = [f"`{c}`" for c in table.instance.column_names]
        return sqlserver_source.drop_snapshot_columns(snapshot).select(*columns)

    def assert_mirrors_readable_outside_spark(self) -> None:
        """DuckDB (no Spark) reads every mirror, deletion vectors included, as the source's
        rows (compared as Delta stores them: ``time`` as text)."""
        for table in self.source.tables:
            columns = list(table.instance.column_names)
            uri = self.source.store.location(table.mirror_key.path)
            outside = multiset(read_with_duckdb(uri, columns))
            expected = multiset(encode_for_delta(self.source_rows(table)).collect())
            assert outside == expected, (
                f"{table.qualified_name}: DuckDB reads {sum(outside.values())} rows, the source "
                f"has {sum(expected.values())}; differing: {list(outside - expected)[:2]} / "
                f"{list(expected - outside)[:2]}"
            )

    def assert_mirrors_equal_source(self, tables: Sequence[CapturedTable] | None = None) -> Lsn:
        """Every mirror (of ``tables``, default all) holds exactly the source table's rows
        (multiset) at one common LSN."""
        at = set()
        for table in self.source.tables if tables is None else tables:
            at.add(mirror_lsn(self.source, table))
            # Both sides as Spark's collect gives them, compared as multisets here: one Spark job
            # (the mirror's read) where two exceptAll and a count took about ten.
            mirror = multiset(self.mirror(table).collect())
            current = multiset(self.source_rows(table).collect())  # a local relation: no job
            for a, b, where in ((mirror, current, "mirror"), (current, mirror, "source")):
                extra = list((a - b).elements())[:3]
                assert not extra, f"{table.qualified_name}: rows only in the {where}: {extra}"
            # the row count its last commit recorded (from MERGE metrics) is the real one
            position = mirror_position(self.source, table)
            rows = position.rows if position is not None else None
            assert rows == mirror.total(), (table.qualified_name, position)
        assert len(at) == 1, f"the mirrors are at different LSNs: {at}"
        lsn = at.pop()
        assert lsn is not None
        return lsn


def assert_small_mirrors_equal(harness: SyncHarness) -> None:
    """Every mirror of a source of ``small_tables`` equals its table, read by DuckDB."""
    conn = emulator.connect(str(harness.db), autocommit=True)
    try:
        expected = {
            t.name: multiset(conn.execute(f"SELECT id, name, qty FROM [dbo].[{t.name}]"))
            for t in harness.source.tables
        }
    finally:
        conn.close()
    for table in harness.source.tables:
        location = harness.source.store.location(table.mirror_key.path)
        rows = read_with_duckdb(location, ["id", "name", "qty"])
        assert multiset(rows) == expected[table.name], table.name


@dataclass
class Held:
    """A function of a module held where it is called: ``reached`` is set when a call gets
    there, which then waits for ``release`` (``real`` is the function itself)."""

    real: Any
    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


def hold(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, what: str) -> Held:
    """Hold calls of ``module.name`` until the test releases them (``what`` names them in the
    failure if it never does)."""
    held = Held(getattr(module, name))

    def wait_then_call(*args: Any, **kwargs: Any) -> Any:
        held.reached.set()
        assert held.release.wait(300), f"the test never released {what}"
        return held.real(*args, **kwargs)

    monkeypatch.setattr(module, name, wait_then_call)
    return held


def failure_text(result: ExecuteInProcessResult) -> str:
    events = [e for e in result.all_events if e.is_failure]
    return "; ".join(str(e.event_specific_data) for e in events)[:3000] or "run failed"


def failure_summary(result: ExecuteInProcessResult) -> str:
    """Each failed step and its errors' messages, the cause last, without stacks."""
    steps = []
    for event in result.all_events:
        if event.is_step_failure:
            error, messages = event.step_failure_data.error, []
            while error is not None:
                messages.append(error.message.strip()[:400])
                error = error.cause or error.context
            steps.append(f"{event.step_key}: " + " <- ".join(messages))
    return " | ".join(steps) or "run failed"


def assert_succeeded(result: ExecuteInProcessResult) -> None:
    """Fail with the whole failure, then (last, where a cut report of the output keeps it)
    its summary."""
    if not result.success:
        pytest.fail(f"{failure_text(result)}\nIn short: {failure_summary(result)}")


def make_harness(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    *,
    seed: int = 0,
    rows: int = 30,
    tables: tuple[TableDef, ...] = DEMO_TABLES,
    max_transactions: int = 10_000,
    snapshot_mode: str = "auto",
    chunk_rows: int = 250_000,
    chunks_per_commit: int = 0,
    on_gap: str = "resnapshot",
    owners: tuple[str, ...] = (),
    examples: tuple[str, ...] = (),
    retain_ranges: int | str = "1d",
    storage: str | None = None,
    connection: dict[str, Any] | None = None,
    maintenance: MaintenancePolicy | None = None,
    exclude: tuple[str, ...] = (),
) -> SyncHarness:
    """``connection``: the source's ``connection:`` config (default: the emulator file itself;
    the TDS tests give an ``odbc:`` one reaching the same file through a real driver);
    ``exclude``: tables (``schema.table`` patterns) the source does not capture."""
    db = tmp_path / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    workload = create_demo_database(
        conn, seed=seed, rows_per_table=rows, tables=tables, polling_interval=None
    )
    emulator.scan(db)
    config = parse_config(
        {
            "sources": [
                {
                    "name": SOURCE,
                    "connection": connection or {"emulator": {"path": str(db)}},
                    "sync": {
                        "max_transactions_per_range": max_transactions,
                        "on_gap": on_gap,
                        "retain_ranges": retain_ranges,
                    },
                    "snapshot": {
                        "mode": snapshot_mode,
                        "chunk_rows": chunk_rows,
                        "chunks_per_commit": chunks_per_commit,
                    },
                    "owners": list(owners),
                    "tables": {"exclude": list(exclude)},
                }
            ],
            "storage": {"base_path": storage or str(tmp_path / "storage")},
            "spark": {"master": "local[2]"},
            "examples": list(examples),
        },
        base_dir=tmp_path,
        origin="test config",
    )
    source = load_source(config.sources[0], config.storage.base_path)
    if maintenance is not None:  # as given, unvalidated: tests may keep no history at all
        source = replace(
            source, config=source.config.model_copy(update={"maintenance": maintenance})
        )
    defs = build_definitions(config, [source])
    return SyncHarness(db, source, defs, instance, workload, spark, config=config)


# Dagster's SQLite event log commits, and syncs, each event: ~8 ms on this disk, ~4 ms in memory,
# and a run over a thousand tables stores ~20 events a table. A test instance needs no durability.
MEMORY_BACKED = Path("/dev/shm")


@pytest.fixture
def instance() -> Iterator[DagsterInstance]:
    where = str(MEMORY_BACKED) if MEMORY_BACKED.is_dir() else None
    with (
        tempfile.TemporaryDirectory(dir=where, prefix="dagster-") as home,
        instance_for_test(temp_dir=home) as dagster_instance,
    ):
        yield dagster_instance


@pytest.fixture
def harness(tmp_path: Path, spark: SparkSession, instance: DagsterInstance) -> SyncHarness:
    return make_harness(tmp_path, spark, instance)
