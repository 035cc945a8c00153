"""Keeping the Delta tables' storage bounded: what the maintenance job runs per table.

A Delta table keeps every file its earlier versions used (a MERGE rewrites or marks files; the
old ones stay for time travel) and, for the mirrors, the change data feed's files; its log keeps
a JSON file per commit. Left alone, a mirror synced every few seconds grows without end while its
rows stay the same. Per table, and only when something is to be done:

- :func:`set_history_retention` sets ``delta.logRetentionDuration`` and
  ``delta.deletedFileRetentionDuration`` to the configured history (one commit, only when they
  differ): Delta then drops expired log files at its next checkpoint, and time travel
  (``read_mirror_as_of``, reconcile's reads) reaches back that far;
- :func:`vacuum` deletes the data files no version within the history uses;
- :func:`drop_partitions` deletes whole change-log partitions (the rows of ranges retired from
  Dagster, when the source is configured to drop them): a metadata-only delete, since
  ``_cdc_partition`` is the physical partitioning; their files go at a later VACUUM.

A history shorter than Delta's default 7 days needs ``spark.databricks.delta.retentionDurationCheck
.enabled=false`` (set on every session: :data:`.session.DEFAULT_CONF`): the setting is the user's
choice, made in the config. A writer slower than the history could lose files it still reads, so
the config refuses a history under 10 minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession

from .asset_store import PARTITION_COLUMN, sql_string
from .concurrent_commits import retry_conflicts

HISTORY_PROPERTIES = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")
_DELETE_BATCH = 500  # partition keys per DELETE statement (one commit each)


@dataclass(frozen=True)
class TableUpkeep:
    """What maintenance did to one table."""

    uri: str
    retention_set: bool
    partitions_dropped: int
    version_before: int
    version_after: int


def interval(seconds: float) -> str:
    """A Delta duration property value: ``interval N seconds``."""
    return f"interval {int(seconds)} seconds"


def table_version(spark: SparkSession, uri: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT 1").collect()[0]["version"])


def set_history_retention(spark: SparkSession, uri: str, seconds: float) -> bool:
    """Make the table keep ``seconds`` of history; False (and no commit) if it already does."""
    wanted = interval(seconds)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]
    current = dict(detail["properties"] or {})
    if all(current.get(name) == wanted for name in HISTORY_PROPERTIES):
        return False
    assignments = ", ".join(f"'{name}' = '{wanted}'" for name in HISTORY_PROPERTIES)
    statement = f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ({assignments})"
    retry_conflicts(lambda: spark.sql(statement), f"setting the history kept by {uri}")
    return True


def drop_partitions(spark: SparkSession, uri: str, keys: Sequence[str]) -> int:
    """Delete every row of the partitions ``keys`` (a commit per batch of keys)."""
    for start in range(0, len(keys), _DELETE_BATCH):
        batch = ", ".join(sql_string(k) for k in keys[start : start + _DELETE_BATCH])
        statement = f"DELETE FROM delta.`{uri}` WHERE {PARTITION_COLUMN} IN ({batch})"
        retry_conflicts(lambda s=statement: spark.sql(s), f"dropping retired partitions of {uri}")
    return len(keys)


def vacuum(spark: SparkSession, uri: str, seconds: float) -> None:
    """Delete the files no version of the last ``seconds`` uses (and that no version does)."""
    hours = max(seconds, 0.0) / 3600
    # also here: a Spark Connect client passes only spark.sql.* settings to its session
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"VACUUM delta.`{uri}` RETAIN {hours:.6f} HOURS")


def keep_bounded(
    spark: SparkSession, uri: str, history_seconds: float, drop: Sequence[str] = ()
) -> TableUpkeep:
    """All of the above for one table, in order: retention, dropped partitions, VACUUM."""
    before = table_version(spark, uri)
    changed = set_history_retention(spark, uri, history_seconds)
    dropped = drop_partitions(spark, uri, drop) if drop else 0
    vacuum(spark, uri, history_seconds)
    return TableUpkeep(uri, changed, dropped, before, table_version(spark, uri))
