"""Shared fixtures: one Spark session for the whole test session (local[2], UI off); under
`make test` each of the two pytest-xdist workers is its own test session with its own Spark."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

# Executors must run this interpreter (the venv's), or they lack the project's packages.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# The longest files first: `make test` gives whole files to two workers in collection order, so
# a long file collected last would run alone at the end (the browser test did: ~3 min).
LONGEST_FIRST = (
    "cdc_assets_tests/dagster/test_thousand_tables.py",
    "cdc_assets_tests/dagster/test_kill_faults.py",
    "cdc_assets_tests/ui/test_browser.py",
    "cdc_assets_tests/test_demo_ends.py",
    "cdc_assets_tests/dagster/test_sync.py",
    "cdc_assets_tests/dagster/test_soak.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order inside a file and among the rest is kept


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """Started on first use only, so tests that need no Spark do not pay its start-up."""
    from cdc_assets.spark.session import build_spark_session

    session = build_spark_session(
        master="local[2]",
        app_name="cdc_assets_tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.ui.showConsoleProgress": "false",
            # The suite is CPU-bound on 2 cores; the throughput collector spends less CPU than
            # G1's concurrent marking on this heap (measured: 24 vs 64 CPU-s in 6 sync tests).
            "spark.driver.extraJavaOptions": "-XX:+UseParallelGC",
        },
        # with the S3 jars: the object-store tests share this session (test_object_store.py)
        storage_path="s3a://cdc-assets-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def cold_delta_logs() -> Iterator[None]:
    """After each test, Delta's cache of table logs is emptied: every test writes tables of its
    own, which a long session would otherwise keep (bounded by the session's
    ``delta.log.cacheSize``, but each test starts as a new process would). So are the names
    the test registered (the views of the databases it made, dropped in the external catalog:
    no view analysed, no folder deleted): the next test's source, of the same name, would
    otherwise see them as tables it no longer has and drop them (a Spark job per name)."""
    yield
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from cdc_assets.spark import table_names

    context = SparkContext._active_spark_context
    if context is not None:
        context._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    session = SparkSession.getActiveSession()
    if session is not None and table_names._databases:
        catalog = session._jsparkSession.sessionState().catalog().externalCatalog()
        with table_names._lock:
            for _, catalog_name, database in table_names._databases:
                if catalog_name == table_names.SESSION_CATALOG:
                    shown = session.sql(f"SHOW VIEWS IN {catalog_name}.`{database}`").collect()
                    for row in shown:
                        catalog.dropTable(database, row["viewName"], True, False)  # no purge
