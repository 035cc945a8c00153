"""A sync run that SIGKILLs its own process at a chosen stage (used by ``test_kill_faults``).

``python -m cdc_assets_tests.dagster.kill_runner SPEC.json`` rebuilds the project's definitions
from the spec's config (the same source database and storage as the test), opens the test's
Dagster instance from its serialized ref, arms one kill point and starts Spark. Then it waits for
the file named by the spec's ``go`` entry, which holds the partition key and tags of the run to
execute (the sensor's request), and executes the sync job for it the way the daemon runs a
request. Waiting lets the test start the process — and pay Spark's start-up — while it prepares
the range. The process never ends normally when the kill point is hit: it dies of SIGKILL (exit
status -9 seen by the parent).

Kill points (``stage``; ``nth`` picks which table's change log or mirror, counted in the order
this run reaches them, so earlier tables of the run are complete when it dies):

- ``read``: inside the source read on the executor — the data source has fetched the first
  batch of the ``nth`` change read and not handed it on; nothing of that table is written yet.
  A range of a few changes is read in the driver: killed once read, before it is handed on.
- ``write``: inside the Spark job writing the ``nth`` change log's partition to Delta (the source
  was read and the properties computed; Parquet files are being written, nothing committed),
  or, for a few rows written by delta-rs, as they are laid out for the write.
- ``committed``: right after the ``nth`` change log's Delta commit (Spark's or delta-rs's, read
  back as the table's newest); Dagster has not recorded the materialization.
- ``merge``: inside the Spark job of the ``nth`` mirror's ``MERGE INTO`` (a task has started on
  the merge's source rows), or for a range merged in the driver, before its MERGE; the
  earlier mirrors of the run are committed.

``read``, ``write`` and ``merge`` kill the run process from a Python worker of the executor: the
worker is a separate process, so killing itself would only fail a task, not the run.

Kill points of a snapshot written a batch of chunks per commit (:data:`SNAPSHOT_STAGES`, used by
``test_snapshot_resume``; ``nth`` counts in this run): ``chunk_task`` inside a chunk's read on
an executor, once ``nth`` chunks have been read whole; ``chunk_read`` after the ``nth`` batch
was read (its properties computed), before its commit; ``chunk_committed`` right after the
``nth`` batch's commit. With these stages every chunk read whole is recorded, a JSON line
``{"after": key, "upto": key, "rows": n}`` in the spec's ``reads`` file (keys as
:func:`~cdc_assets.sqlserver.key_values.encode_key` writes them), so the test knows what each
run read.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

STARTED = time.monotonic()
DRIVER_PID = os.getpid()  # captured by value in the functions shipped to Python workers
DRIVER_PID_ENV = "CDC_KILL_RUNNER_DRIVER_PID"  # and inherited by them (JVM, Python daemon)
STAGES = ("read", "write", "committed", "merge")
SNAPSHOT_STAGES = ("chunk_task", "chunk_read", "chunk_committed")
EXIT_NOT_KILLED_SUCCESS = 3
EXIT_NOT_KILLED_FAILURE = 4
EXIT_NO_GO = 5
GO_TIMEOUT = 1800.0  # the test may prepare a range for long on a loaded machine


def _say(text: str) -> None:
    print(f"kill runner [{time.monotonic() - STARTED:6.1f} s]: {text}", file=sys.stderr, flush=True)


def kill_driver() -> None:
    """SIGKILL the run process; in a worker, wait until it is gone, then leave without a word."""
    driver = int(os.environ.get(DRIVER_PID_ENV, DRIVER_PID))
    os.kill(driver, signal.SIGKILL)  # in the run process itself, this is the end
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(driver, 0)  # a zombie still answers: the test process reaps it at once
        except ProcessLookupError:
            break
        time.sleep(0.05)
    os._exit(1)  # never complete the task: its output must not be committed


def _kill_on_first_row(_value: Any) -> bool:
    """A Python UDF's body: the first row that reaches it ends the run."""
    kill_driver()
    return True


def _arm_snapshot(stage: str, nth: int, reads: str) -> None:
    """The kill points of a snapshot written in chunk commits, and the record of chunk reads."""
    from cdc_assets.spark import chunk_commits, sqlserver_source
    from cdc_assets.sqlserver.key_values import encode_key

    def completed() -> int:
        path = Path(reads)
        return len(path.read_text().splitlines()) if path.exists() else 0

    class CountingReader(sqlserver_source._Reader):
        def _snapshot(self, key_range):  # type: ignore[no-untyped-def]
            rows = 0
            kill = stage == "chunk_task" and completed() >= nth
            for batch in super()._snapshot(key_range):
                if kill:
                    kill_driver()  # inside the task, the chunk half read
                rows += batch.num_rows
                yield batch
            with open(reads, "a") as out:  # a line per chunk read whole
                after, upto = key_range.after, key_range.upto
                record = {
                    "after": None if after is None else encode_key(after),
                    "upto": None if upto is None else encode_key(upto),
                    "rows": rows - 1,  # the marker row is not a table row
                }
                out.write(json.dumps(record) + "\n")

    class CountingSource(sqlserver_source.SqlServerDataSource):
        @classmethod
        def name(cls) -> str:
            return "cdc_sqlserver_counting"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return CountingReader(self._plan(), schema)

    real_load = sqlserver_source._load

    def load(spark, plan, source=None):  # type: ignore[no-untyped-def]
        return real_load(spark, plan, CountingSource if plan.lsn_range is None else source)

    sqlserver_source._load = load
    real_commit = chunk_commits._commit
    commits = {"n": 0}

    def commit(*args, **kwargs):  # type: ignore[no-untyped-def]
        commits["n"] += 1
        if stage == "chunk_read" and commits["n"] == nth:
            kill_driver()  # the batch is read and its properties computed: not committed
        published = real_commit(*args, **kwargs)
        if stage == "chunk_committed" and commits["n"] == nth:
            kill_driver()  # committed; Dagster has heard nothing of it
        return published

    chunk_commits._commit = commit


def _arm(stage: str, nth: int, storage: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    from cdc_assets.spark import (
        asset_store,
        driver_writes,
        mirror_merge,
        spark_merges,
        sqlserver_source,
    )
    from cdc_assets.spark.asset_store import AssetStore

    counts = {"cdc": 0, "mirror": 0, "read": 0}

    def tree(location: str) -> str:
        return Path(location).relative_to(storage).parts[0]

    def hit(kind: str) -> bool:
        counts[kind] += 1
        return counts[kind] == nth

    if stage == "read":

        class KillingReader(sqlserver_source._Reader):
            def _changes(self, lsn_range):  # type: ignore[no-untyped-def]
                for _batch in super()._changes(lsn_range):
                    kill_driver()
                kill_driver()  # an empty range: killed when its read ends
                yield from ()

        class KillingSource(sqlserver_source.SqlServerDataSource):
            @classmethod
            def name(cls) -> str:
                return "cdc_sqlserver_kill"

            def reader(self, schema):  # type: ignore[no-untyped-def]
                return KillingReader(self._plan(), schema)

        real_load = sqlserver_source._load

        def load(spark, plan, source=None):  # type: ignore[no-untyped-def]
            if plan.lsn_range is None or not hit("read"):
                return real_load(spark, plan, source)
            return real_load(spark, plan, KillingSource)

        sqlserver_source._load = load
        real_in_driver = sqlserver_source.read_changes_in_driver

        def read_in_driver(settings, instance, lsn_range, **kwargs):  # type: ignore[no-untyped-def]
            rows = real_in_driver(settings, instance, lsn_range, **kwargs)
            if hit("read"):
                kill_driver()  # read, not handed on
            return rows

        sqlserver_source.read_changes_in_driver = read_in_driver
    elif stage == "write":
        # The properties row goes into the same Spark job as the partition's rows: a killer
        # filter on it dies inside that job, after the source read and the properties.
        real_row = AssetStore._properties_row
        killer = F.udf(_kill_on_first_row, BooleanType(), useArrow=False).asNondeterministic()

        def properties_row(self, spark, like, partition, properties):  # type: ignore[no-untyped-def]
            row = real_row(self, spark, like, partition, properties)
            if str(properties.get("kind")) in ("snapshot", "range") and hit("cdc"):
                return row.where(killer(F.lit(0)))
            return row

        AssetStore._properties_row = properties_row  # type: ignore[method-assign]
        # a range of a few rows is written by delta-rs: killed as its rows are laid out
        real_rows = driver_writes.as_partition_rows

        def partition_rows(rows, schema, partition):  # type: ignore[no-untyped-def]
            if hit("cdc"):
                kill_driver()
            return real_rows(rows, schema, partition)

        driver_writes.as_partition_rows = partition_rows
    elif stage == "merge":
        real_merge = spark_merges.run_merge
        killer = F.udf(_kill_on_first_row, BooleanType(), useArrow=False).asNondeterministic()

        def run_merge(spark, store, uri, source, statement, properties):  # type: ignore[no-untyped-def]
            if hit("mirror"):
                source = source.where(killer(F.lit(0)))
            return real_merge(spark, store, uri, source, statement, properties)

        spark_merges.run_merge = run_merge
        # a small range is merged in the driver: killed once its checks passed, before it merges
        real_last = mirror_merge.last_change_per_key_in_driver

        def last_change(changes, key_columns, snapshot_lsn=None):  # type: ignore[no-untyped-def]
            if hit("mirror"):
                kill_driver()
            return real_last(changes, key_columns, snapshot_lsn)

        mirror_merge.last_change_per_key_in_driver = last_change
    elif stage == "committed":
        # every commit, Spark's or delta-rs's, is read back as the newest one of its table
        real_newest = asset_store.last_commit_published

        def newest_commit(table, uri, properties):  # type: ignore[no-untyped-def]
            found = real_newest(table, uri, properties)
            if tree(uri) == "cdc" and hit("cdc"):
                kill_driver()
            return found

        asset_store.last_commit_published = newest_commit
        driver_writes.last_commit_published = newest_commit
    else:
        raise SystemExit(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")


def _warm_up(spark: Any, scratch: Path) -> None:
    """The first Spark jobs of a JVM are slow: run the kinds the sync runs (a Python data
    source, Python workers, a Delta write and read) on throwaway data, outside the storage."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Rows(DataSourceReader):
        def read(self, partition):  # type: ignore[no-untyped-def]
            yield from ((i, str(i)) for i in range(10))

    class Warm(DataSource):
        @classmethod
        def name(cls) -> str:
            return "cdc_kill_runner_warm_up"

        def schema(self) -> str:
            return "i int, s string"

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return Rows()

    spark.dataSource.register(Warm)
    df = spark.read.format(Warm.name()).load()
    df.write.format("delta").mode("overwrite").save(str(scratch))
    spark.read.format("delta").load(str(scratch)).groupBy("s").count().collect()
    spark.sparkContext.parallelize([0], 1).map(lambda x: x).collect()


def _wait_for_go(go: Path) -> dict[str, Any] | None:
    parent = os.getppid()
    deadline = time.monotonic() + GO_TIMEOUT
    while time.monotonic() < deadline and os.getppid() == parent:
        if go.exists():
            return json.loads(go.read_text())
        time.sleep(0.05)
    return None  # the test gave up (or died): leave quietly


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    os.environ[DRIVER_PID_ENV] = str(os.getpid())  # before Spark starts: its workers inherit it
    from dagster import DagsterInstance
    from dagster._core.instance.ref import InstanceRef
    from dagster_shared.serdes import deserialize_value

    from cdc_assets.config import parse_config
    from cdc_assets.dagster.definitions_builder import build_definitions
    from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG
    from cdc_assets.dagster.sync.names import sync_job_name
    from cdc_assets.dagster.sync.source import load_source
    from cdc_assets.spark.session import build_spark_session

    config = parse_config(spec["config"], base_dir=Path(spec["base_dir"]), origin="kill runner")
    source = load_source(config.sources[0], config.storage.base_path)
    if spec["stage"] in SNAPSHOT_STAGES:
        _arm_snapshot(spec["stage"], int(spec["nth"]), spec["reads"])
    else:
        _arm(spec["stage"], int(spec["nth"]), Path(config.storage.base_path))
    defs = build_definitions(config, [source])
    job = defs.resolve_job_def(sync_job_name(source.name))
    # The session the run's resource gets (getOrCreate), started now with its Python workers.
    spark = build_spark_session(
        master=config.spark.master, app_name="cdc_assets", conf=config.spark.conf
    )
    spark.sparkContext.setLogLevel("ERROR")
    _warm_up(spark, Path(spec["scratch"]))
    _say(f"ready to kill at {spec['stage']} #{spec['nth']}")
    go = _wait_for_go(Path(spec["go"]))
    if go is None:
        return EXIT_NO_GO
    _say(f"running {go['partition_key']}")
    ref = deserialize_value(spec["instance_ref"], InstanceRef)
    with DagsterInstance.from_ref(ref) as instance:
        result = job.execute_in_process(
            instance=instance,
            partition_key=go["partition_key"],
            tags=go["tags"],
            run_config=QUIET_RUN_CONFIG,
            raise_on_error=False,
        )
    _say(f"kill point {spec['stage']} #{spec['nth']} not reached; success={result.success}")
    return EXIT_NOT_KILLED_SUCCESS if result.success else EXIT_NOT_KILLED_FAILURE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
