"""Building the Spark session cdc_assets runs on.

One place decides the session's settings, so tests, the headless demo and the Dagster resource get
the same Spark: the master URL (``local[*]`` by default, ``spark://…`` for a standalone cluster),
few shuffle partitions (our batches are small and the default 200 costs seconds per stage), the UI
off unless asked for, and Python workers running the same interpreter as the driver — otherwise
executors start another Python that lacks the project's packages.
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


def build_spark_session(
    *,
    master: str = "local[*]",
    app_name: str = "cdc_assets",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session for ``master``, created with :data:`DEFAULT_CONF` and ``conf``."""
    use_this_python_for_workers()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
