"""Building the Spark session cdc_assets runs on.

One place decides the session's settings, so tests, the headless demo and the Dagster resource get
the same Spark: the master URL (``local[*]`` by default, ``spark://…`` for a standalone cluster),
few shuffle partitions (our batches are small and the default 200 costs seconds per stage), the UI
off unless asked for, Python workers running the same interpreter as the driver — otherwise
executors start another Python that lacks the project's packages — and Delta Lake. A Spark
Connect server (``spark.remote: sc://host:port``) has all of that already
(:mod:`.connect_server` starts it with the same settings): a run attaches to it in about a second
instead of starting a Spark of its own.

Delta Lake's jars are fetched by Maven when the project is installed (``scripts/install_jars.sh``)
into ``<sys.prefix>/share/cdc_assets/jars`` and named on ``spark.jars``: nothing is downloaded when
Spark starts. Storage on ``s3a://`` also needs hadoop-aws and the AWS SDK, kept apart in
``.../jars-s3`` (fetched by the same script) and loaded only for such storage.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

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
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Delta reads a table's log with this many tasks (default 50): our logs are small, and 50
    # tasks cost seconds per read on a few cores.
    "spark.databricks.delta.snapshotPartitions": "4",
    # Delta keeps every table it has touched in a cache of table logs, each holding its snapshot's
    # cached state and query plans: measured 2-4 MB of driver heap per table, kept up to 10,000
    # tables for an hour by default. A driver that syncs hundreds of tables (or runs for hours,
    # a Spark Connect server) filled a 1 GB heap that way and failed a MERGE's broadcast. Keep the
    # most recently used 64 (a table evicted costs one log replay when next read).
    "spark.databricks.delta.delta.log.cacheSize": "64",
    # VACUUM keeps what maintenance.keep_history says (the user's choice, at least 10 minutes),
    # not at least Delta's 7 days (:mod:`.table_maintenance`).
    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
    # VACUUM lists a table's files with this many tasks (default 10000): minutes per table on a
    # few cores for a table of a few files. A cluster with many cores may raise it.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "16",
    # The tables of a step run side by side from driver threads
    # (cdc_assets.dagster.sync.table_pool), and the runs attached to a Spark Connect server share
    # its cores. Spark schedules jobs first in, first out by default: a range run's 4-task job
    # waited 10 s behind another session's 40 tasks of 0.5 s on local[2] (0.9 s shared), and a small
    # table's MERGE waits behind every task of a big table's. Fair sharing within the default pool
    # (fair_scheduler.xml).
    "spark.scheduler.mode": "FAIR",
    "spark.scheduler.allocation.file": str(Path(__file__).with_name("fair_scheduler.xml")),
}

# Another Spark Connect server than spark.remote of the config names (make demo's DEMO_SPARK_PORT).
REMOTE_ENV = "CDC_ASSETS_SPARK_REMOTE"
JARS_ENV = "CDC_ASSETS_JARS"  # another folder holding the jars (default: see jars_folder)
DELTA_JARS = ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")
INSTALL_COMMAND = "bash scripts/install_jars.sh (or make setup)"


class MissingJars(RuntimeError):
    """The Delta Lake (or S3) jars are not where the session looks for them."""


def jars_folder() -> Path:
    """Where scripts/install_jars.sh puts the Delta jars for this interpreter."""
    configured = os.environ.get(JARS_ENV)
    return Path(configured) if configured else Path(sys.prefix) / "share" / "cdc_assets" / "jars"


def s3_jars_folder() -> Path:
    return jars_folder().with_name(jars_folder().name + "-s3")


def needs_s3_jars(storage_path: str | None) -> bool:
    return bool(storage_path) and str(storage_path).startswith(("s3a://", "s3://"))


def delta_jars(storage_path: str | None = None) -> list[str]:
    """The jars for ``spark.jars``; :class:`MissingJars` (one line naming the fix) if absent."""
    folder = jars_folder()
    missing = [name for name in DELTA_JARS if not (folder / name).is_file()]
    if missing:
        raise MissingJars(
            f"Delta Lake jars missing from {folder} ({', '.join(missing)}): run {INSTALL_COMMAND}"
        )
    jars = [str(folder / name) for name in DELTA_JARS]
    if needs_s3_jars(storage_path):
        s3 = s3_jars_folder()
        found = sorted(str(p) for p in s3.glob("*.jar")) if s3.is_dir() else []
        if not found:
            raise MissingJars(
                f"storage on {storage_path} needs hadoop-aws jars in {s3}: run {INSTALL_COMMAND}"
            )
        jars += found
    return jars


# spark.sql.* settings fixed when the server starts: a Spark Connect client cannot set them.
STATIC_SQL_SETTINGS = frozenset({"spark.sql.extensions"})


def session_conf(
    conf: Mapping[str, str] | None = None, *, storage_path: str | None = None
) -> dict[str, str]:
    """:data:`DEFAULT_CONF`, the Delta jars (plus any ``spark.jars`` in ``conf``), then ``conf``."""
    extra = dict(conf or {})
    jars = delta_jars(storage_path)
    if extra.get("spark.jars"):
        jars.append(extra.pop("spark.jars"))
    return {**DEFAULT_CONF, "spark.jars": ",".join(jars), **extra}


def use_this_python_for_workers() -> None:
    """Point ``PYSPARK_PYTHON`` (and the driver's) at this interpreter unless the user set it."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def remote_url(configured: str | None) -> str | None:
    """The Spark Connect URL to use: :data:`REMOTE_ENV` when set, else ``spark.remote``."""
    return os.environ.get(REMOTE_ENV) or configured


def session_options(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "cdc_assets",
    conf: Mapping[str, str] | None = None,
    storage_path: str | None = None,
) -> dict[str, str]:
    """The builder options: :func:`session_conf` with the master, or ``spark.remote`` for a
    Spark Connect server, which has its own master, jars and static settings: the client sets
    only the ``spark.sql.*`` ones that a session may change (a static one would be refused with
    a warning in every run's log)."""
    if remote is not None:
        options = {**DEFAULT_CONF, **(conf or {})}
        runtime = {
            k: v
            for k, v in options.items()
            if k.startswith("spark.sql.") and k not in STATIC_SQL_SETTINGS
        }
        return {"spark.remote": remote, "spark.app.name": app_name, **runtime}
    options = session_conf(conf, storage_path=storage_path)
    return {"spark.master": master, "spark.app.name": app_name, **options}


def build_spark_session(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "cdc_assets",
    conf: Mapping[str, str] | None = None,
    storage_path: str | None = None,
) -> SparkSession:
    """The active session for ``master`` (or the Spark Connect server ``remote``), created with
    :func:`session_options`."""
    use_this_python_for_workers()
    builder = SparkSession.builder
    options = session_options(
        master=master, remote=remote, app_name=app_name, conf=conf, storage_path=storage_path
    )
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


def use_in_this_thread(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread on the JVM side, where SQL
    settings are looked up per thread (a driver thread of its own would otherwise read the
    defaults: TimeType refused). Nothing to do over Spark Connect (settings live server-side)."""
    session = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if session is None or jvm is None:
        return
    jvm.org.apache.spark.sql.classic.SparkSession.setActiveSession(session)
