"""Runs a sync through a Spark Connect server (``spark.remote: sc://...``) in its own process.

The test session holds a classic local SparkSession (one per process), and a process with a
SparkContext cannot open a Connect session, so :mod:`.test_spark_connect` runs this file as a
subprocess: the ``snapshot`` run, two range runs, and the mirrors compared with the source, all
through the project's definitions whose Spark resource is a Connect session. It prints one line
``RESULT <json>`` on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

RESULT_PREFIX = "RESULT "
TABLES = ("customers", "orders")


def main(argv: list[str]) -> int:
    work, remote = Path(argv[0]), argv[1]

    from dagster import instance_for_test

    from cdc_assets import emulator
    from cdc_assets.config import parse_config
    from cdc_assets.dagster.definitions_builder import build_definitions
    from cdc_assets.dagster.sync.source import load_source
    from cdc_assets.workload import DEMO_TABLES, create_demo_database
    from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness

    db = work / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    workload = create_demo_database(
        conn,
        seed=3,
        rows_per_table=30,
        tables=[t for t in DEMO_TABLES if t.name in TABLES],
        polling_interval=None,
    )
    emulator.scan(db)
    config = parse_config(
        {
            "sources": [{"name": SOURCE, "connection": {"emulator": {"path": str(db)}}}],
            "storage": {"base_path": str(work / "storage")},
            "spark": {"remote": remote},
        },
        base_dir=work,
        origin="connect runner",
    )
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    started = time.monotonic()
    spark = (defs.resources or {})["pyspark"].spark_session  # what every run gets
    spark.range(1).count()
    attach = time.monotonic() - started
    partitions: list[str] = []
    with instance_for_test() as instance:
        harness = SyncHarness(db, source, defs, instance, workload, spark)
        harness.sync(limit=3)
        for _ in range(2):
            for _ in range(6):
                workload.step()
            harness.capture()
            harness.sync(limit=3)
        partitions = [r.dagster_run.tags.get("dagster/partition", "") for r in harness.results]
        lsn = harness.assert_mirrors_equal_source()
    result = {
        "session": f"{type(spark).__module__}.{type(spark).__name__}",
        "attach_seconds": round(attach, 2),
        "partitions": partitions,
        "mirror_lsn": lsn.hex,
        "tables": [t.instance.name for t in source.tables],
    }
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
