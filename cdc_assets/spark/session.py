"""Building the Spark session cdc_assets runs on.

One place decides the session's settings, so tests, the headless demo and the Dagster resource get
the same Spark: the master URL (``local[*]`` by default, ``spark://…`` for a standalone cluster)
or a Spark Connect server (``sc://host:port``: a warm Spark a run attaches to in about a second
instead of starting its own), few shuffle partitions (our batches are small and the default 200
costs seconds per stage), the UI off unless asked for, and Python workers running the same
interpreter as the driver — otherwise executors start another Python that lacks the project's
packages.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    # no "[Stage n: ...]" progress bars in run logs and dagster dev's console
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # SQL Server ``time`` columns are Spark's TimeType (Spark 4.1+), which Parquet and Arrow
    # exchange only with this switch on.
    "spark.sql.timeType.enabled": "true",
}


def use_this_python_for_workers() -> None:
    """Point ``PYSPARK_PYTHON`` (and the driver's) at this interpreter unless the user set it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def session_options(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "cdc_assets",
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The builder options: :data:`DEFAULT_CONF` and ``conf`` with the master, or with
    ``spark.remote`` for a Spark Connect server (which has its own master and static settings;
    the client sets only the runtime ``spark.sql.*`` ones and PySpark skips static ones)."""
    options = {**DEFAULT_CONF, **(conf or {})}
    if remote is not None:
        runtime = {k: v for k, v in options.items() if k.startswith("spark.sql.")}
        return {"spark.remote": remote, "spark.app.name": app_name, **runtime}
    return {"spark.master": master, "spark.app.name": app_name, **options}


def build_spark_session(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "cdc_assets",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session for ``master`` (or the Spark Connect server ``remote``), created with
    :data:`DEFAULT_CONF` and ``conf``."""
    use_this_python_for_workers()
    builder = SparkSession.builder
    options = session_options(master=master, remote=remote, app_name=app_name, conf=conf)
    for key, value in options.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def write_parallelism(spark: SparkSession) -> int:
    """How many files a small write should produce: ``spark.default.parallelism`` when set,
    else the shuffle partitions. Read from the session's conf, so it works over Spark Connect
    too (``spark.sparkContext`` does not exist there)."""
    value = spark.conf.get("spark.default.parallelism", None) or spark.conf.get(
        "spark.sql.shuffle.partitions", "1"
    )
    return max(1, int(value or 1))
