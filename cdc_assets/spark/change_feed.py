"""What changed in a mirror or a history since a version a reader consumed: Delta's change data
feed between two versions, or the whole table where the feed cannot say.

Mirrors and histories have the change data feed on, and every commit that moves them records the
LSN it reached in its ``userMetadata`` (:mod:`.mirror_versions`). :func:`changes_since` gives the
rows that changed after version ``after`` up to the table's current version (``insert``,
``delete``, ``update_preimage``, ``update_postimage`` in ``_change_type``, with the Delta version
and commit timestamp of each and the LSN that version reached: :data:`LSN_COLUMN`), or, with the
reason, the whole table as of that version when the feed is not a "changes since":

- no version consumed yet (a first run), or the table is another one now (a new table id: it was
  deleted and created again);
- a commit in between replaced the table rather than changed it: a rebuild from a (re-)snapshot
  is a full overwrite, which the feed would give as every old row deleted and every new one
  inserted (a different snapshot in the commits' ``userMetadata`` says so too);
- the versions are no longer readable: the log was cleaned past the first of them, or a
  ``VACUUM`` may have deleted their files (a commit older than the horizon of a ``VACUUM`` logged
  since: its start minus the retention it kept).

Commits that change no row are not changes: compaction (``OPTIMIZE``, any commit whose file
actions all have ``dataChange=false``), ``VACUUM``, table property changes. Which commits change
rows is read from each commit's actions on a local file system (the driver's fast path, as
Delta's own feed reader decides) and from its operation elsewhere (an operation not known to
change rows in place is taken as a rebuild: the whole table, never a wrong feed).

The rows themselves are read by Spark (``readChangeFeed`` between the two versions), which works
on every store and over Spark Connect; columns stored otherwise (:mod:`.stored_columns`) are read
back as the source has them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import delta_log, driver_feed_reads
from .commit_metadata import NotPublished
from .delta_location import delta_rs_storage_options, delta_rs_uri, is_local, local_path
from .mirror_versions import LSN, SNAPSHOT_VERSION
from .stored_columns import decode_from_delta

CHANGE_TYPE = "_change_type"  # Delta's columns of the feed
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
LSN_COLUMN = "_lsn"  # ours: the LSN (hex) the change's version reached

# operations whose commits change rows, read by the feed as changes (their ``_change_data``
# files, or the rows they append)
ROW_CHANGES = {"MERGE", "UPDATE", "DELETE", "STREAMING UPDATE"}
# operations whose commits change no row
NO_ROW_CHANGE = {
    "OPTIMIZE",
    "VACUUM START",
    "VACUUM END",
    "SET TBLPROPERTIES",
    "UNSET TBLPROPERTIES",
    "UPGRADE PROTOCOL",
    "ADD FEATURE",
    "CHECKPOINT",
    "REORG",
}


@dataclass(frozen=True)
class FeedRead:
    """What a reader consumed of a table: its id and the versions ``(after, to]`` (``after``
    None: the whole table as of ``to``)."""

    table_id: str
    after: int | None
    to: int

    def as_metadata(self) -> dict[str, Any]:
        return {"table_id": self.table_id, "after_version": self.after, "to_version": self.to}

    @staticmethod
    def from_metadata(found: Mapping[str, Any] | None) -> FeedRead | None:
        if not found or "to_version" not in found or "table_id" not in found:
            return None
        after = found.get("after_version")
        return FeedRead(
            str(found["table_id"]), None if after is None else int(after), int(found["to_version"])
        )


@dataclass(frozen=True)
class TableChanges:
    """The changes of the table at ``uri`` after version ``read.after`` up to ``read.to``, or
    (``full``) the whole table as of ``read.to`` and why (``reason``)."""

    spark: SparkSession = field(repr=False, compare=False)
    uri: str
    read: FeedRead
    full: bool
    reason: str | None
    after_lsn: str | None  # the LSN version ``read.after`` had reached (hex), when known
    to_lsn: str | None  # ... and version ``read.to``
    lsns: Mapping[int, str] = field(default_factory=dict)  # version -> the LSN it reached

    @cached_property
    def rows(self) -> DataFrame:
        """The change rows (the table's columns and the feed's: :data:`CHANGE_TYPE`,
        :data:`COMMIT_VERSION`, :data:`COMMIT_TIMESTAMP`, :data:`LSN_COLUMN`), or (``full``)
        the table as of ``read.to``. Spark reads them when used (a reader that takes
        :meth:`feed_in_driver` pays no Spark job)."""
        if self.full:
            return self.table()
        if self.empty:
            return _with_feed_columns(self.table().limit(0))
        assert self.read.after is not None
        feed = (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", self.read.after + 1)
            .option("endingVersion", self.read.to)
            .load(self.uri)
        )
        return _with_lsn(decode_from_delta(feed), self.lsns, self.read.after, self.read.to)

    def feed_in_driver(self, columns: Sequence[str]) -> pa.Table | None:
        """The change rows (``columns`` and the feed's, as :attr:`rows` has them) read in the
        driver, no Spark job (:func:`.driver_feed_reads.feed_rows`); None for the whole table
        or where Spark must read them."""
        if self.full or self.read.after is None:
            return None
        found = driver_feed_reads.feed_rows(self.uri, self.read.after, self.read.to, columns)
        if found is None:
            return None
        rows, stamps = found
        versions = rows.column(COMMIT_VERSION).to_pylist()
        stamp = pa.array([stamps[v] for v in versions], pa.int64()).cast(pa.timestamp("ms", "UTC"))
        lsn = pa.array([_lsn_at(self.lsns, v) for v in versions], pa.string())
        return rows.append_column(COMMIT_TIMESTAMP, stamp).append_column(LSN_COLUMN, lsn)

    def rows_of_days_in_driver(
        self, columns: Sequence[str], day_column: str, days: Sequence[Any]
    ) -> pa.Table | None:
        """The table's rows at ``read.to`` whose ``day_column`` (a timestamp) is on one of
        ``days`` (dates; None: null), read in the driver (:func:`.driver_feed_reads.rows_of_days`);
        None where Spark must read them."""
        return driver_feed_reads.rows_of_days(self.uri, self.read.to, columns, day_column, days)

    def table(self) -> DataFrame:
        """The whole table as of ``read.to``, the version the changes end at."""
        reader = self.spark.read.format("delta").option("versionAsOf", self.read.to)
        return decode_from_delta(reader.load(self.uri))

    @property
    def empty(self) -> bool:
        """No change at all (nothing committed after the version consumed)."""
        return not self.full and self.read.after == self.read.to


@dataclass(frozen=True)
class _Commit:
    version: int
    timestamp_ms: int
    operation: str
    parameters: Mapping[str, Any]
    user_metadata: Mapping[str, Any]


def table_version(uri: str) -> tuple[str, int] | None:
    """(table id, current version) of the Delta table at ``uri``; None when there is none."""
    table = _open(uri)
    if table is None:
        return None
    return table.metadata().id, table.version()


def changes_since(
    spark: SparkSession, uri: str, consumed: FeedRead | None, *, what: str = "table"
) -> TableChanges:
    """The rows of the table at ``uri`` that changed after ``consumed.to`` (its current version
    read now), or the whole table with the reason (module docstring). ``what`` names the table
    in the reason (``"mirror"``, ``"history"``)."""
    table = _open(uri)
    if table is None:
        raise NotPublished(f"no data has been published at {uri}: materialize it first")
    table_id, to = table.metadata().id, table.version()
    commits = _commits(table)
    lsns = {c.version: c.user_metadata.get(LSN) for c in commits if c.user_metadata.get(LSN)}
    to_lsn = _lsn_at(lsns, to)
    reason = _why_whole(uri, table_id, to, consumed, commits, what)
    if reason is not None:
        read = FeedRead(table_id, None, to)
        return TableChanges(spark, uri, read, True, reason, None, to_lsn, lsns)
    assert consumed is not None
    read = FeedRead(table_id, consumed.to, to)
    after_lsn = _lsn_at(lsns, consumed.to)
    return TableChanges(spark, uri, read, False, None, after_lsn, to_lsn, lsns)


def _why_whole(
    uri: str,
    table_id: str,
    to: int,
    consumed: FeedRead | None,
    commits: Sequence[_Commit],
    what: str,
) -> str | None:
    """Why the changes after ``consumed`` are not a feed (the whole table is read); None when
    they are."""
    if consumed is None:
        return f"no earlier version of the {what} was consumed (a first run)"
    if consumed.table_id != table_id:
        return f"the {what} was created anew since version {consumed.to} was consumed"
    if consumed.to > to:
        return f"the {what} is at version {to}, before the version {consumed.to} consumed"
    after = consumed.to
    if after == to:
        return None
    kept = {c.version for c in commits}
    if after + 1 not in kept:
        return f"version {after + 1} of the {what} is no longer in its log (history kept)"
    by_version = {c.version: c for c in commits}
    snapshots = {
        c.version: c.user_metadata[SNAPSHOT_VERSION]
        for c in commits
        if c.user_metadata.get(SNAPSHOT_VERSION) is not None
    }
    snapshot = _newest_at(snapshots, after)
    horizon = _vacuum_horizon(commits)
    for version in range(after + 1, to + 1):
        commit = by_version.get(version)
        if commit is None:
            return f"version {version} of the {what} is no longer in its log (history kept)"
        kind = _kind(uri, commit)
        if kind == "none":
            continue
        if kind == "rebuild":
            return (
                f"the {what} was rebuilt at version {version} ({commit.operation}: a new "
                "snapshot), which is not a change since the version consumed"
            )
        if horizon is not None and commit.timestamp_ms <= horizon:
            return (
                f"a VACUUM may have deleted the files of version {version} of the {what} "
                f"(version {after} consumed)"
            )
        # a mirror is rebuilt from each new snapshot (a history takes it by a MERGE: a feed)
        rebuilt_from = commit.user_metadata.get(SNAPSHOT_VERSION)
        if what == "mirror" and snapshot is not None and rebuilt_from not in (None, snapshot):
            return f"the {what} was rebuilt from a new snapshot at version {version}"
    return None


def _kind(uri: str, commit: _Commit) -> str:
    """``"changes"`` (the commit changes rows in place), ``"none"`` (no row changes) or
    ``"rebuild"`` (it replaces rows wholesale: not a change since)."""
    if is_local(uri):
        actions = _actions(uri, commit.version)
        if actions is not None:
            return _kind_of_actions(actions)
    if commit.operation in NO_ROW_CHANGE:
        return "none"
    if commit.operation in ROW_CHANGES:
        return "changes"
    if commit.operation == "WRITE" and str(commit.parameters.get("mode", "")).lower() == "append":
        return "changes"
    return "rebuild"


def _kind_of_actions(actions: Sequence[Mapping[str, Any]]) -> str:
    """As Delta's feed reader sees a commit: ``_change_data`` files are its changes; else files
    added with ``dataChange`` are inserts; a file removed with ``dataChange`` and no change data
    is a rewrite (overwrite), not a change since; no ``dataChange`` file action: no change."""
    cdc = any("cdc" in a for a in actions)
    added = any(a.get("add", {}).get("dataChange", False) for a in actions if "add" in a)
    removed = any(a.get("remove", {}).get("dataChange", False) for a in actions if "remove" in a)
    if cdc:
        return "changes"
    if removed:
        return "rebuild"
    return "changes" if added else "none"


def _actions(uri: str, version: int) -> list[dict[str, Any]] | None:
    try:
        text = delta_log.commit_file(local_path(uri), version).read_text()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _vacuum_horizon(commits: Sequence[_Commit]) -> int | None:
    """The newest horizon of a logged ``VACUUM`` (its start minus the retention it kept, in ms):
    files of commits at or before it may be gone."""
    horizons = []
    for commit in commits:
        if commit.operation != "VACUUM START":
            continue
        kept = commit.parameters.get("specifiedRetentionMillis")  # 0: RETAIN 0 HOURS
        if kept is None:
            kept = commit.parameters.get("defaultRetentionMillis")
        try:
            horizons.append(commit.timestamp_ms - int(kept))
        except (TypeError, ValueError):
            horizons.append(commit.timestamp_ms)  # retention unknown: all before it
    return max(horizons, default=None)


def _newest_at(recorded: Mapping[int, Any], version: int | None) -> Any | None:
    """What the newest commit at or before ``version`` recorded (of those in ``recorded``)."""
    if version is None:
        return None
    found = [v for v in recorded if v <= version]
    return recorded[max(found)] if found else None


def _lsn_at(lsns: Mapping[int, str], version: int | None) -> str | None:
    """The LSN the table had reached at ``version``."""
    return _newest_at(lsns, version)


def _with_lsn(feed: DataFrame, lsns: Mapping[int, str], after: int, to: int) -> DataFrame:
    """The feed with :data:`LSN_COLUMN`: the LSN each row's version reached."""
    pairs = [(v, _lsn_at(lsns, v)) for v in range(after + 1, to + 1)]
    mapping = F.create_map(*[F.lit(x) for pair in pairs for x in pair]) if pairs else None
    if mapping is None:
        return feed.withColumn(LSN_COLUMN, F.lit(None).cast("string"))
    return feed.withColumn(LSN_COLUMN, F.element_at(mapping, F.col(COMMIT_VERSION)))


def _with_feed_columns(rows: DataFrame) -> DataFrame:
    """``rows`` with the feed's columns (an empty feed has the feed's schema too)."""
    return rows.select(
        "*",
        F.lit(None).cast("string").alias(CHANGE_TYPE),
        F.lit(None).cast("long").alias(COMMIT_VERSION),
        F.lit(None).cast("timestamp").alias(COMMIT_TIMESTAMP),
        F.lit(None).cast("string").alias(LSN_COLUMN),
    )


def _open(uri: str) -> Any | None:
    from deltalake import DeltaTable

    where, options = delta_rs_uri(uri), delta_rs_storage_options()
    if not DeltaTable.is_deltatable(where, storage_options=options):
        return None
    return DeltaTable(where, storage_options=options)


def _commits(table: Any) -> list[_Commit]:
    """Every commit the table's log still holds (delta-rs's history), oldest first."""
    found = []
    for entry in table.history():
        text = entry.get("userMetadata")
        try:
            metadata = json.loads(text) if text else {}
        except ValueError:
            metadata = {}
        found.append(
            _Commit(
                version=int(entry["version"]),
                timestamp_ms=int(entry.get("timestamp") or 0),
                operation=str(entry.get("operation") or ""),
                parameters=entry.get("operationParameters") or {},
                user_metadata=metadata if isinstance(metadata, dict) else {},
            )
        )
    return sorted(found, key=lambda c: c.version)
