"""Keeping the Delta tables' storage bounded: what the maintenance job runs per table.

A Delta table keeps every file its earlier versions used (a MERGE rewrites or marks files, a
compaction replaces small files; the old ones stay for time travel) and, for the mirrors, the
change data feed's files; its log keeps a JSON file per commit. Left alone, a mirror synced every
few seconds grows without end while its rows stay the same. Per table, and only when something
is to be done:

- :func:`set_history_retention` sets ``delta.logRetentionDuration`` and
  ``delta.deletedFileRetentionDuration`` to the configured history (one commit, only when they
  differ): expired log files are then deleted after each checkpoint (Spark's, and the driver's
  commits': :func:`.deletion_vector_commits.clean_expired_log`), and time travel
  (``read_mirror_as_of``, reconcile's reads) reaches back that far;
- VACUUM deletes the data files no version within the history uses;
- :func:`drop_partitions` deletes whole change-log partitions (the rows of ranges retired from
  Dagster, when the source is configured to drop them); their files go at a later VACUUM.

Compaction is not here: the writer compacts its own small files right after its commit
(:mod:`.compaction`), where nothing races it. What is here never loses to the sync's commits.
On a local table it is all the driver's (:func:`keep_bounded_in_driver`): the property change
and the partition drop its own commits (:mod:`.driver_rewrites`, :mod:`.partition_drops`),
milliseconds that are planned again when a range run took the version, and VACUUM
(:mod:`.driver_vacuum`) keeps exactly the history configured and commits nothing; a table costs
a read of its log and a listing of its folder, no Spark job. Elsewhere it is Spark's
(:func:`keep_bounded_with_spark`), its commits retried (:mod:`.concurrent_commits`), and a table
with nothing left to do is passed over after reading its recent history and its properties
(:func:`nothing_to_vacuum`): a source of hundreds of tables, most of them quiet, would otherwise
VACUUM each one every run (seconds each) to delete nothing.

A history shorter than Delta's default 7 days needs ``spark.databricks.delta.retentionDurationCheck
.enabled=false`` (set on every session: :data:`.session.DEFAULT_CONF`): the setting is the user's
choice, made in the config. A writer slower than the history could lose files it still reads, so
the config refuses a history under 10 minutes.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Row, SparkSession

from . import delta_log
from .concurrent_commits import retry_conflicts
from .delta_location import is_local, local_path
from .driver_rewrites import set_configuration
from .driver_vacuum import vacuum_in_driver
from .partition_drops import drop_in_driver
from .partition_rows import PARTITION_COLUMN
from .spark_sql_names import sql_string

HISTORY_PROPERTIES = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")
_DELETE_BATCH = 500  # partition keys per DELETE statement (one commit each)
HISTORY_READ = 50  # recent commits read to tell whether a table has anything to vacuum
# commits that remove no data file: a VACUUM's own, and setting the history kept
KEEPS_FILES = {"VACUUM START", "VACUUM END", "SET TBLPROPERTIES"}


@dataclass(frozen=True)
class TableUpkeep:
    """What maintenance did to one table."""

    uri: str
    skipped: bool  # nothing to do: no file became deletable since the last VACUUM
    retention_set: bool
    partitions_dropped: int
    version_before: int
    version_after: int
    files_deleted: int | None = None  # by the VACUUM, when it says (the driver's does)


def interval(seconds: float) -> str:
    """A Delta duration property value: ``interval N seconds``."""
    return f"interval {int(seconds)} seconds"


def recent_commits(spark: SparkSession, uri: str, limit: int) -> list[Row]:
    """The table's ``limit`` newest commits, newest first."""
    return spark.sql(f"DESCRIBE HISTORY delta.`{uri}` LIMIT {limit}").collect()


def table_version(spark: SparkSession, uri: str) -> int:
    return int(recent_commits(spark, uri, 1)[0]["version"])


def table_detail(spark: SparkSession, uri: str) -> Row:
    """``DESCRIBE DETAIL`` of the table: its properties, number of files and size."""
    return spark.sql(f"DESCRIBE DETAIL delta.`{uri}`").collect()[0]


def keeps_history(detail: Row, seconds: float) -> bool:
    """The table (its :func:`table_detail`) is set to keep ``seconds`` of history."""
    current = dict(detail["properties"] or {})
    return all(current.get(name) == interval(seconds) for name in HISTORY_PROPERTIES)


def set_history_retention(
    spark: SparkSession, uri: str, seconds: float, detail: Row | None = None
) -> bool:
    """Make the table keep ``seconds`` of history; False (and no commit) if it already does.
    ``detail``: the table's :func:`table_detail` when the caller has read it."""
    wanted = interval(seconds)
    if keeps_history(detail or table_detail(spark, uri), seconds):
        return False
    if is_local(uri):
        done = set_configuration(local_path(uri), dict.fromkeys(HISTORY_PROPERTIES, wanted))
        if done is not None:
            return done
    assignments = ", ".join(f"'{name}' = '{wanted}'" for name in HISTORY_PROPERTIES)
    statement = f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ({assignments})"
    retry_conflicts(lambda: spark.sql(statement), f"setting the history kept by {uri}")
    return True


def drop_partitions(spark: SparkSession, uri: str, keys: Sequence[str]) -> int:
    """Delete every row of the partitions ``keys``: in the driver on a local table
    (:func:`.partition_drops.drop_in_driver`), else by Spark (a commit per batch of keys)."""
    if is_local(uri) and drop_in_driver(local_path(uri), keys) is not None:
        return len(keys)
    for start in range(0, len(keys), _DELETE_BATCH):
        batch = ", ".join(sql_string(k) for k in keys[start : start + _DELETE_BATCH])
        statement = f"DELETE FROM delta.`{uri}` WHERE {PARTITION_COLUMN} IN ({batch})"
        retry_conflicts(lambda s=statement: spark.sql(s), f"dropping retired partitions of {uri}")
    return len(keys)


def retain_hours(seconds: float) -> int:
    """The ``RETAIN`` of a VACUUM keeping ``seconds`` of history (see :func:`vacuum`)."""
    return math.ceil(max(seconds, 0.0) / 3600)


def nothing_to_vacuum(history: Sequence[Row], seconds: float) -> bool:
    """Whether a VACUUM now would delete nothing the last one did not: ``history`` (the table's
    newest commits, newest first) holds a completed VACUUM that kept the same hours, and every
    commit that can leave files behind (any but a VACUUM's and a property change: writes,
    MERGEs, DELETEs, OPTIMIZE; also a failed write's files come before its rerun's commit) is
    older than that VACUUM's horizon, so it deleted all they left. False when the history read
    does not reach back far enough to tell."""
    retain = dt.timedelta(hours=retain_hours(seconds))
    end = next((i for i, c in enumerate(history) if c["operation"] == "VACUUM END"), None)
    if end is None or (history[end]["operationParameters"] or {}).get("status") != "COMPLETED":
        return False
    start = next((c for c in history[end:] if c["operation"] == "VACUUM START"), None)
    if start is None:
        return False
    kept = (start["operationParameters"] or {}).get("specifiedRetentionMillis")
    if kept != str(int(retain.total_seconds() * 1000)):
        return False  # the history kept changed, or the VACUUM was not this module's
    horizon = start["timestamp"] - retain  # what it deleted was removed before this
    for commit in history:
        if commit["operation"] in KEEPS_FILES:
            continue
        return commit["timestamp"] <= horizon  # the newest such commit decides
    return False  # none in the commits read: older ones may be within the horizon


def vacuum(spark: SparkSession, uri: str, seconds: float) -> None:
    """Delete the files no version of the last ``seconds`` uses (and that no version does).
    Delta rounds ``RETAIN`` to whole hours (0.17 h is 0: every file the current version does
    not use would go, time travel within the history with them), so the hours are rounded up:
    the history kept is at least ``seconds``."""
    hours = retain_hours(seconds)
    # also here: a Spark Connect client passes only spark.sql.* settings to its session
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"VACUUM delta.`{uri}` RETAIN {hours} HOURS")


def keep_bounded(
    spark: SparkSession,
    uri: str,
    history_seconds: float,
    drop: Sequence[str] = (),
) -> TableUpkeep:
    """All of the above for one table, in order: retention, dropped partitions, VACUUM; on a
    local table by the driver (:func:`keep_bounded_in_driver`), else by Spark
    (:func:`keep_bounded_with_spark`)."""
    if is_local(uri):
        done = keep_bounded_in_driver(uri, history_seconds, drop)
        if done is not None:
            return done
    return keep_bounded_with_spark(spark, uri, history_seconds, drop)


def keep_bounded_in_driver(
    uri: str, history_seconds: float, drop: Sequence[str] = ()
) -> TableUpkeep | None:
    """:func:`keep_bounded` of a local table without Spark: the history setting and the dropped
    partitions the driver's own commits (:func:`.driver_rewrites.set_configuration`,
    :func:`.partition_drops.drop_in_driver`), VACUUM the driver's too, keeping exactly the
    history asked (:func:`.driver_vacuum.vacuum_in_driver`: no commit, no hour rounding); a
    read of the log and a listing of the folder when there is nothing to do. None when the
    driver does not write this table."""
    table = local_path(uri)
    before = delta_log.latest_version(table)
    wanted = dict.fromkeys(HISTORY_PROPERTIES, interval(history_seconds))
    changed = set_configuration(table, wanted)
    if before is None or changed is None:
        return None
    dropped = 0
    if drop:
        if drop_in_driver(table, drop) is None:
            return None
        dropped = len(drop)
    deleted = vacuum_in_driver(table, history_seconds)
    if deleted is None:
        return None
    after = delta_log.latest_version(table)
    assert after is not None
    quiet = not changed and not dropped and not deleted
    return TableUpkeep(uri, quiet, changed, dropped, before, after, deleted)


def keep_bounded_with_spark(
    spark: SparkSession,
    uri: str,
    history_seconds: float,
    drop: Sequence[str] = (),
) -> TableUpkeep:
    """:func:`keep_bounded` by Spark. Nothing but two reads when the table keeps the history
    asked, no partition is to be dropped and :func:`nothing_to_vacuum`."""
    history = recent_commits(spark, uri, HISTORY_READ)
    before = int(history[0]["version"])
    detail = table_detail(spark, uri)  # one read for all: the retention commit moves no file
    quiet = keeps_history(detail, history_seconds) and nothing_to_vacuum(history, history_seconds)
    if quiet and not drop:
        return TableUpkeep(uri, True, False, 0, before, before)
    changed = set_history_retention(spark, uri, history_seconds, detail)
    dropped = drop_partitions(spark, uri, drop) if drop else 0
    vacuum(spark, uri, history_seconds)
    return TableUpkeep(uri, False, changed, dropped, before, table_version(spark, uri))
