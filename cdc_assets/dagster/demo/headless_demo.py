"""``cdc-assets demo --headless``: the continuous sync of ``make demo`` in one process, checked.

The same definitions as the code location run against a fresh emulated demo source while the
workload writes: the sync sensor's ticks are evaluated here and the runs they request are executed
in process on a local Dagster instance. When the workload stops, capture catches up, the sensor
brings every mirror to the end of the log, and each mirror is compared with its source table
(both read through the same Spark type mapping): the last line says ``equal`` or shows the first
difference.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dagster import DagsterInstance, Definitions

from cdc_assets import emulator
from cdc_assets.config import parse_config
from cdc_assets.lsn import Lsn
from cdc_assets.spark import sqlserver_source
from cdc_assets.sqlserver import get_max_lsn, last_transaction_lsn
from cdc_assets.workload import Workload, create_demo_database

from ..definitions_builder import build_definitions
from ..mirror import mirror_lsn
from ..sync.names import SNAPSHOT_PARTITION, sync_job_name
from ..sync.source import Source, load_source
from .in_process import step_seconds, sync_step

Say = Callable[[str], None]
SOURCE = "demo"


@dataclass
class Progress:
    runs: int = 0
    failed_runs: int = 0
    ranges: int = 0
    transactions: int = 0


class HeadlessDemo:
    def __init__(
        self,
        workdir: Path,
        *,
        rows: int,
        tps: float,
        seed: int,
        say: Say,
        still_wanted: Callable[[], None] = lambda: None,
    ) -> None:
        # called between runs: raises (KeyboardInterrupt) when the demo must stop. Dagster holds
        # SIGINT and SIGTERM back while a run executes (it interrupts the run's step instead), so
        # a stop asked during a run is seen here, after it.
        self.still_wanted = still_wanted
        # Absolute: the config below resolves relative paths against the work dir once more.
        self.workdir = workdir.resolve()
        self.db = self.workdir / "source.db"
        self.rows, self.tps, self.seed, self.say = rows, tps, seed, say
        self.progress = Progress()

    def prepare(self) -> tuple[Source, Definitions, DagsterInstance]:
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        conn = emulator.connect(str(self.db), autocommit=True)
        try:
            create_demo_database(conn, seed=self.seed, rows_per_table=self.rows)
        finally:
            conn.close()
        emulator.scan(self.db)  # establish the capture instances before discovery
        config = parse_config(
            {
                "sources": [{"name": SOURCE, "connection": {"emulator": {"path": str(self.db)}}}],
                "storage": {"base_path": str(self.workdir / "storage")},
                "spark": {"master": "local[2]"},
            },
            base_dir=self.workdir,
            origin="headless demo",
        )
        source = load_source(config.sources[0], config.storage.base_path)
        defs = build_definitions(config, [source])
        home = self.workdir / "dagster_home"
        home.mkdir()
        instance = DagsterInstance.local_temp(str(home))
        self.say(f"demo source {self.db} with {len(source.tables)} captured tables")
        return source, defs, instance

    def tick(self, source: Source, defs: Definitions, instance: DagsterInstance) -> bool:
        """One sensor evaluation and the run it requests; False when there was nothing to do."""
        started = time.monotonic()
        decision, result = sync_step(defs.resolve_job_def(sync_job_name(SOURCE)), instance, source)
        request = decision.run_request
        if request is None or result is None:
            return False
        self.progress.ranges += decision.new_partition not in (None, SNAPSHOT_PARTITION)
        self.progress.runs += 1
        self.progress.failed_runs += not result.success
        steps = ", ".join(
            f"{key.removeprefix(SOURCE + '_').replace('_', ' ')} {seconds:.1f} s"
            for key, seconds in step_seconds(instance, result.run_id).items()
        )
        self.say(
            f"run {self.progress.runs}: {request.partition_key} "
            f"{'ok' if result.success else 'FAILED'} in {time.monotonic() - started:.1f} s "
            f"({steps})"
        )
        return True

    def run(self, seconds: float) -> bool:
        source, defs, instance = self.prepare()
        agent = emulator.CaptureAgent(self.db).start()
        writer = emulator.connect(str(self.db), autocommit=True)
        workload = Workload(writer, seed=self.seed + 1)
        thread = threading.Thread(
            target=workload.run, kwargs={"seconds": seconds, "tps": self.tps}, daemon=True
        )
        thread.start()
        try:
            while thread.is_alive():
                self.still_wanted()
                if not self.tick(source, defs, instance):
                    time.sleep(source.config.sync.sensor_interval_seconds / 5)
            thread.join()
            self.progress.transactions = workload.stats.transactions
        finally:
            agent.stop()
            writer.close()
        while emulator.scan(self.db) > 0:  # capture catches up with everything committed
            pass
        while self.tick(source, defs, instance):
            self.still_wanted()
        return self.verify(source, defs)

    def verify(self, source: Source, defs: Definitions) -> bool:
        conn = source.connect()
        try:
            last = last_transaction_lsn(conn)
            maximum = get_max_lsn(conn)
        finally:
            conn.close()
        spark = defs.resources["pyspark"].spark_session  # type: ignore[index]
        settings = source.config.connection_settings()
        at: set[Lsn] = set()
        for table in source.tables:
            lsn = mirror_lsn(source, table)
            if lsn is None or (last is not None and lsn < last):
                self.say(f"{table.qualified_name}: the mirror is at {lsn}, not at {last}")
                return False
            at.add(lsn)
            columns = [f"`{c}`" for c in table.instance.column_names]
            mirror = source.store.read(spark, table.mirror_key.path, None).select(*columns)
            current = sqlserver_source.drop_snapshot_columns(
                sqlserver_source.read_snapshot(spark, settings, table.instance, mode="exact")
            ).select(*columns)
            for name, a, b in (("mirror", mirror, current), ("source", current, mirror)):
                extra = a.exceptAll(b).limit(1).collect()
                if extra:
                    self.say(
                        f"{table.qualified_name}: a row in the {name} only: {extra[0].asDict()}"
                    )
                    return False
        if len(at) != 1:
            self.say(f"the mirrors are at different LSNs: {sorted(x.hex for x in at)}")
            return False
        p = self.progress
        self.say(
            f"{p.transactions} transactions, {p.ranges} ranges, {p.runs} runs "
            f"({p.failed_runs} failed); max LSN {maximum.hex}"
        )
        self.say(f"verified {len(source.tables)} tables at LSN {at.pop().hex}: equal")
        return True


def run_headless_demo(
    workdir: Path,
    seconds: float,
    *,
    rows: int = 300,
    tps: float = 20.0,
    seed: int = 0,
    say: Say = print,
    still_wanted: Callable[[], None] = lambda: None,
) -> bool:
    demo = HeadlessDemo(workdir, rows=rows, tps=tps, seed=seed, say=say, still_wanted=still_wanted)
    return demo.run(seconds)
