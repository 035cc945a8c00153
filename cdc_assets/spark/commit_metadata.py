"""What a Delta commit carries besides its rows: ``commitInfo.userMetadata`` and its metrics.

A mirror's position and a merge's properties travel as the commit's userMetadata (JSON, keys
sorted: :func:`to_json`). Spark sets it from a session conf only, so a commit that carries it
runs in a session of its own (:func:`user_metadata`).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .concurrent_commits import retry_conflicts
from .partition_rows import Properties

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"


# ``commitInfo.userMetadata`` of a MERGE can only be set as a session conf. A classic session
# gives each such commit a session of its own (``newSession``: same SparkContext, own SQL conf),
# so threads of one driver can merge several tables at once; where that is not possible (Spark
# Connect) the commits of this process take turns.
_user_metadata_lock = threading.Lock()


@contextmanager
def user_metadata(spark: SparkSession, text: str) -> Iterator[SparkSession]:
    """A session whose commits carry ``text`` as their userMetadata. Temporary views of
    ``spark`` are not visible in it: share data through global temporary views."""
    try:
        own = spark.newSession()
    except Exception:  # Spark Connect has no newSession: one commit at a time
        own = None
    if own is not None:
        own.conf.set(USER_METADATA_CONF, text)
        yield own
        return
    with _user_metadata_lock:
        spark.conf.set(USER_METADATA_CONF, text)
        try:
            yield spark
        finally:
            spark.conf.unset(USER_METADATA_CONF)


@contextmanager
def without_user_metadata(spark: SparkSession) -> Iterator[SparkSession]:
    """``spark`` for a commit that must carry no userMetadata (a table property change): on
    Spark Connect, where :func:`user_metadata` sets it on the one shared session, this waits
    until no such commit runs."""
    with _user_metadata_lock:
        yield spark


def merge_with_user_metadata(
    spark: SparkSession, uri: str, source: DataFrame, statement: str, text: str
) -> None:
    """Run the ``MERGE INTO`` ``statement`` (``{target}`` and ``{source}`` in it) into the Delta
    table at ``uri`` with ``source`` as a global temporary view (seen by the commit's own
    session), its commit carrying ``text`` as userMetadata; retried on concurrent commits."""
    view = f"cdc_merge_{uuid.uuid4().hex}"
    source.createOrReplaceGlobalTempView(view)
    try:
        target, changes = f"delta.`{uri}`", f"global_temp.{view}"

        def merge() -> None:
            with user_metadata(spark, text) as session:
                session.sql(statement.format(target=target, source=changes)).collect()

        retry_conflicts(merge, f"MERGE into {uri}")
    finally:
        spark.catalog.dropGlobalTempView(view)


def to_json(properties: Mapping[str, Any]) -> str:
    return json.dumps(dict(properties), sort_keys=True, default=str)


# delta-rs's names of the commit metrics Spark's writes report (io_manager's OPERATION_METRICS)
DELTA_RS_METRICS = {
    "num_added_rows": "numOutputRows",
    "num_added_files": "numAddedFiles",
    "num_removed_files": "numRemovedFiles",
    "num_target_rows_inserted": "numTargetRowsInserted",
    "num_target_rows_updated": "numTargetRowsUpdated",
    "num_target_rows_deleted": "numTargetRowsDeleted",
    "num_target_files_added": "numTargetFilesAdded",
    "num_target_files_removed": "numTargetFilesRemoved",
}


class NotPublished(LookupError):
    """Nothing has been published at this location yet."""


@dataclass(frozen=True)
class Published:
    """A committed write: the table, its Delta version, the properties and operation metrics."""

    uri: str
    version: int
    properties: Properties
    metrics: dict[str, int] = field(default_factory=dict)
    user_metadata: str | None = None  # as the commit holds it
    committed: bool = True  # False: nothing was committed, ``version`` is the current one


def last_commit_published(table: Any, uri: str, properties: Properties) -> Published:
    """The newest commit of ``table`` (delta-rs, its log just read) as a :class:`Published`;
    delta-rs's own commits get their metrics under the names Spark's have."""
    last = table.history(limit=1)[0]
    metrics = {
        DELTA_RS_METRICS.get(k, k): int(v)
        for k, v in (last.get("operationMetrics") or {}).items()
        if str(v).isdigit()
    }
    return Published(uri, int(last["version"]), properties, metrics, last.get("userMetadata"))
