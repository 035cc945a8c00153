"""Where each table of a source stands, in one read: the source's sync state.

A range run works on the tables that changed in it. The others — usually nearly all of a large
source — are *quiet*: one statement counted no change rows for them in ``(lo, hi]``, and the
validity interval still covers the range after the count, so their mirrors equal their tables at
``hi`` as they are. They are not read, not written and not materialized one by one; the range is
recorded for all of them at once in the sync state (:mod:`cdc_assets.spark.sync_state_store`),
a small Delta table with a row per table:

- ``snapshot``: the table's published snapshot (what its ``snapshot`` partition says);
- ``mirror_version`` / ``mirror_commit``: the snapshot the mirror is built from and the LSN its
  last Delta commit recorded; ``mirror_at``: where the mirror is — ``mirror_commit``, or later
  when quiet ranges followed it;
- ``reported_at``: when the mirror was last materialized in Dagster (quiet mirrors are
  reported again before their freshness policy would call them overdue);
- ``history_version`` / ``history_commit`` / ``history_at`` / ``history_rows``: the same for
  the table's history, where it has one (the snapshot it is built on, the LSN of its last
  commit, where it is, its rows: versions), and ``history_failures`` / ``history_failed_at`` /
  ``history_failure`` its own failures in a row (a history that fails holds back neither its
  table's change log nor its mirror);
- ``failures`` / ``failed_at`` / ``failure``: how many runs in a row failed for this table alone
  (its snapshot, its range or its mirror), when the last one did and why: the sensor retries
  the table on its own schedule, the pause growing with ``failures`` (:mod:`.table_failures`).

The tables' own Delta commits stay the truth: the state is written after them, so it may lag
behind them (a run killed in between), never run ahead. :func:`mirror_at` combines the two for
a table at hand; the sync sensor reads the state alone and, where it lags, sends the table a
catch-up run that finds the truth and writes it down.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from pyspark.sql import SparkSession

from cdc_assets.lsn import Lsn
from cdc_assets.records import MirrorPosition
from cdc_assets.spark.history_store import position_of as history_position_of
from cdc_assets.spark.mirror_versions import position_of
from cdc_assets.spark.sync_state_store import read_rows, swap_rows

from .chain import SnapshotInfo
from .change_log_state import snapshot_info
from .source import CapturedTable, Source

STATE_PATH = "sync_state"  # <base>/sync_state/<source>


def state_path(source: Source) -> list[str]:
    return [STATE_PATH, source.name]


def table_id(table: CapturedTable) -> str:
    return "/".join(table.change_log_key.path)


@dataclass(frozen=True)
class TableSync:
    """One table's row of the sync state."""

    snapshot: SnapshotInfo | None = None
    mirror_version: str | None = None
    mirror_commit: Lsn | None = None
    mirror_at: Lsn | None = None
    mirror_rows: int | None = None
    reported_at: float | None = None
    failures: int = 0
    failed_at: float | None = None
    failure: str | None = None
    history_version: str | None = None
    history_commit: Lsn | None = None
    history_at: Lsn | None = None
    history_rows: int | None = None
    history_failures: int = 0
    history_failed_at: float | None = None
    history_failure: str | None = None

    @property
    def mirror_built(self) -> bool:
        """The mirror is built from the table's current snapshot."""
        return (
            self.snapshot is not None
            and self.mirror_at is not None
            and self.mirror_version == self.snapshot.version
        )

    def mirror_reached(self, lsn: Lsn) -> bool:
        """The mirror is built from the current snapshot and at ``lsn`` or later."""
        return self.mirror_built and self.mirror_at is not None and self.mirror_at >= lsn

    def history_reached(self, lsn: Lsn) -> bool:
        """The history is built on the table's current snapshot and at ``lsn`` or later."""
        return (
            self.snapshot is not None
            and self.history_version == self.snapshot.version
            and self.history_at is not None
            and self.history_at >= lsn
        )

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        if not self.failures:  # a healthy table's row as it always was
            for name in ("failures", "failed_at", "failure"):
                del data[name]
        if self.history_version is None:  # a table without a history: its row as it was
            for name in ("history_version", "history_commit", "history_at", "history_rows"):
                del data[name]
        if not self.history_failures:
            for name in ("history_failures", "history_failed_at", "history_failure"):
                del data[name]
        for name in ("mirror_commit", "mirror_at", "history_commit", "history_at"):
            if name not in data:
                continue
            value = getattr(self, name)
            data[name] = value.hex if value is not None else None
        if self.snapshot is not None:
            data["snapshot"] = {
                "replay_from": self.snapshot.replay_from.hex,
                "snapshot_lsn": self.snapshot.snapshot_lsn.hex,
                "mode": self.snapshot.mode,
                "version": self.snapshot.version,
                "capture_instance": self.snapshot.capture_instance,
                "rows": self.snapshot.rows,
            }
            if self.snapshot.column_rules:  # absent without rules: the stored form as before
                data["snapshot"]["column_rules"] = self.snapshot.column_rules
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TableSync:
        data = json.loads(text)
        snap = data.get("snapshot")

        def lsn(name: str) -> Lsn | None:
            value = data.get(name)
            return Lsn.parse(value) if value else None

        return cls(
            snapshot=SnapshotInfo(
                Lsn.parse(snap["replay_from"]),
                Lsn.parse(snap["snapshot_lsn"]),
                snap.get("mode", ""),
                snap["version"],
                snap.get("capture_instance", ""),
                snap.get("rows"),
                snap.get("column_rules", ""),
            )
            if snap
            else None,
            mirror_version=data.get("mirror_version"),
            mirror_commit=lsn("mirror_commit"),
            mirror_at=lsn("mirror_at"),
            mirror_rows=data.get("mirror_rows"),
            reported_at=data.get("reported_at"),
            failures=data.get("failures") or 0,
            failed_at=data.get("failed_at"),
            failure=data.get("failure"),
            history_version=data.get("history_version"),
            history_commit=lsn("history_commit"),
            history_at=lsn("history_at"),
            history_rows=data.get("history_rows"),
            history_failures=data.get("history_failures") or 0,
            history_failed_at=data.get("history_failed_at"),
            history_failure=data.get("history_failure"),
        )


def from_stores(source: Source, table: CapturedTable) -> TableSync:
    """What the table's own Delta tables say (two reads): the state of a table the sync state
    has no row for yet (a new table, storage written before the sync state existed)."""
    snapshot = snapshot_info(source, table)
    committed = position_of(source.store.properties(table.mirror_key.path, None))
    if committed is None:
        return with_stored_history(source, table, TableSync(snapshot=snapshot))
    row = TableSync(
        snapshot=snapshot,
        mirror_version=committed.snapshot_version,
        mirror_commit=committed.lsn,
        mirror_at=committed.lsn,
        mirror_rows=committed.rows,
    )
    return with_stored_history(source, table, row)


def with_stored_history(source: Source, table: CapturedTable, row: TableSync) -> TableSync:
    """``row`` with where the table's history is, read from the history's last commit, when the
    table has a history the row does not know of (a row written before histories were in the
    state, a history added since); ``row`` itself otherwise."""
    if row.history_version is not None or not source.has_history(table):
        return row
    committed = history_position_of(source.store.properties(table.history_key.path, None))
    if committed is None:
        return row
    return replace(
        row,
        history_version=committed.snapshot_version,
        history_commit=committed.lsn,
        history_at=committed.lsn,
    )


class SourceSync:
    """The sync state of a source as read once: every table's :class:`TableSync`, and what
    each row held (so writes change only rows nobody changed since)."""

    def __init__(self, source: Source, read: Mapping[str, str]) -> None:
        self.source = source
        self._read = dict(read)
        self.tables: dict[CapturedTable, TableSync] = {}
        self.missing: list[CapturedTable] = []
        for table in source.tables:
            text = self._read.get(table_id(table))
            if text is None:
                self.missing.append(table)
                self.tables[table] = TableSync()
            else:
                self.tables[table] = TableSync.from_json(text)

    @classmethod
    def load(cls, source: Source, *, fill: bool = True) -> SourceSync:
        """One read of the state; with ``fill``, tables without a row are read from their own
        Delta tables (written down by the next update that touches them)."""
        found = cls(source, read_rows(source.store, state_path(source)))
        if fill:
            for table in found.missing:
                found.tables[table] = from_stores(source, table)
            for table in source.history_tables:
                found.tables[table] = with_stored_history(source, table, found.tables[table])
        return found

    def __getitem__(self, table: CapturedTable) -> TableSync:
        return self.tables[table]

    def write(self, spark: SparkSession | None, updates: Mapping[CapturedTable, TableSync]) -> None:
        """Write ``updates`` (rows nobody changed since this state was read; the others are
        left as the other writer made them) and keep them as this state's view."""
        swaps = {}
        for table, new in updates.items():
            key = table_id(table)
            swaps[key] = (self._read.get(key), new.to_json())
        swap_rows(spark, self.source.store, state_path(self.source), swaps)
        for table, new in updates.items():
            self.tables[table] = new
            self._read[table_id(table)] = new.to_json()


def forget_snapshot(spark: SparkSession | None, source: Source, table: CapturedTable) -> None:
    """Before a new snapshot's first chunk commit replaces the table's ``snapshot`` partition:
    its row says the table has no snapshot (an unfinished one is none), so the sensor sends the
    table a snapshot run (which resumes) whatever happens to this one. Written ahead of the
    store, on purpose: "no snapshot" is never a claim the store contradicts for long — the
    partition holds an unfinished snapshot from the first commit on, and the run that finishes
    it writes the new snapshot down. A row changed by someone else meanwhile is read again."""
    for _ in range(5):
        sync = SourceSync.load(source, fill=False)
        if table in sync.missing or sync[table].snapshot is None:
            return
        sync.write(spark, {table: replace(sync[table], snapshot=None)})
    raise RuntimeError(f"{table.qualified_name}: the sync state kept changing under the snapshot")


def now() -> float:
    return dt.datetime.now(dt.UTC).timestamp()


def with_mirror(
    row: TableSync, version: str, lsn: Lsn, rows: int | None, reported: float | None
) -> TableSync:
    """The row after a commit of the mirror at ``lsn`` built from snapshot ``version``, holding
    ``rows`` rows."""
    return replace(
        row,
        mirror_version=version,
        mirror_commit=lsn,
        mirror_at=lsn,
        mirror_rows=rows,  # None: not known (never the count of another commit)
        reported_at=reported if reported is not None else row.reported_at,
    )


def describes(row: TableSync | None, committed: MirrorPosition | None) -> bool:
    """``row`` was written after exactly the mirror commit that recorded ``committed``."""
    if row is None or committed is None or committed.lsn is None:
        return False
    return (
        row.mirror_commit == committed.lsn
        and row.mirror_version == committed.snapshot_version
        and row.mirror_at is not None
    )


def mirror_at(committed: MirrorPosition | None, row: TableSync | None) -> tuple[Lsn | None, bool]:
    """Where a mirror is: the LSN of its last commit (``committed``: what that commit recorded),
    moved on by the quiet ranges the sync state recorded after exactly that commit. Also
    whether quiet ranges moved it."""
    if committed is None or committed.lsn is None:
        return None, False
    at = committed.lsn
    moved = row.mirror_at if row is not None and describes(row, committed) else None
    if moved is not None and moved > at:
        return moved, True
    return at, False


def tables_by_id(tables: Iterable[CapturedTable]) -> dict[str, CapturedTable]:
    return {table_id(t): t for t in tables}
