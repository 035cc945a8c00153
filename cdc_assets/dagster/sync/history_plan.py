"""Where a table's history is and what brings it to a range's end (the history asset's plan).

A history's position is the LSN its last commit recorded (each commit's ``userMetadata``, with
the snapshot it is built on), moved on by the quiet ranges the source's sync state recorded
after exactly that commit (:mod:`.quiet_ranges`), as a mirror's is. From there a range run
applies the ranges up to its end that hold changes for the table (a range without a change-log
partition must be one recorded quiet). A history is built on its table's snapshot (its versions
open at the snapshot LSN) and a re-snapshot closes and opens, at the new snapshot LSN, the rows
that differ.

A history never fails for having fallen behind the retention of range partitions
(``sync.retain_ranges``: the sensor retires no range a history still needs, but a history added
to the config later, or one the sync state did not know of, may start behind them): it is
rebuilt on its mirror's rows at the mirror's LSN instead, the mirror being the table at that LSN
(what the retired ranges would have brought it to: their changes' own versions are gone with
them), and carries on from there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dagster import Failure
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets.lsn import START_LSN, Lsn, LsnRange
from cdc_assets.spark import history_driver, history_store, mirror_versions, sqlserver_source
from cdc_assets.spark.change_log_properties import range_of
from cdc_assets.spark.mirror_merge import rows_after_keyed_changes, rows_after_multiset_changes
from cdc_assets.sqlserver.lsn_queries import commit_time_at_or_before

from .chain import ChainGap, SnapshotInfo, ranges_covering
from .change_log_state import AwaitsResnapshot, awaited_resnapshot, snapshot_info
from .names import SNAPSHOT_PARTITION
from .source import CapturedTable, Source
from .sync_state import SourceSync, TableSync, mirror_at

Ranges = Callable[[Lsn], Sequence[LsnRange]]
RULES = "column_rules"  # in a history commit's properties: the rules' fingerprint ...
RULES_FROM = "column_rules_from"  # ... and the LSN from which its versions are stored under them


def history_position(
    source: Source, table: CapturedTable, sync: SourceSync | None = None
) -> history_store.HistoryPosition | None:
    """Where the table's history is: its last commit's LSN, moved on by the quiet ranges the
    sync state recorded after that commit; None: no history yet. ``sync``: the source's sync
    state when the caller has read it."""
    return _positions(source, table, sync)[1]


def _positions(
    source: Source,
    table: CapturedTable,
    sync: SourceSync | None,
    properties: Mapping[str, Any] | None = None,
) -> tuple[history_store.HistoryPosition | None, history_store.HistoryPosition | None]:
    """What the history's last commit recorded (``properties``: its ``userMetadata``, when
    read already), and where the history is (:func:`history_position`)."""
    if properties is None:
        properties = source.store.properties(table.history_key.path, None)
    committed = history_store.position_of(properties)
    if committed is None:
        return None, None
    row = (sync or SourceSync.load(source, fill=False)).tables.get(table)
    if (
        row is not None
        and row.history_commit == committed.lsn
        and row.history_version == committed.snapshot_version
        and row.history_at is not None
        and row.history_at > committed.lsn
    ):
        return committed, replace(committed, lsn=row.history_at)
    return committed, committed


def tracked_columns(source: Source, table: CapturedTable) -> tuple[str, ...] | None:
    """The table's ``track_history_columns`` (None: every change makes a version); a
    :class:`Failure` naming a column the table does not have."""
    tracked = source.config.history.tracked_columns(table.schema, table.name)
    if tracked is None:
        return None
    columns = list(table.instance.column_names)
    unknown = [c for c in tracked if c not in columns]
    if unknown:
        raise Failure(
            f"{table.qualified_name}: history.track_history_columns names {unknown}, which the "
            f"table does not have (its columns: {', '.join(columns)}); fix the source's config."
        )
    return tracked


@dataclass(frozen=True)
class HistoryPlan:
    """What brings a history to a range's end: the write (None: nothing to commit), why no
    range is applied (when none is), what is done (for the metadata), where the history is
    then and the LSN its last commit records then (its sync-state row's part; None: no
    history yet)."""

    write: history_driver.HistoryWrite | None
    why: str
    done: dict[str, Any]
    reached: history_store.HistoryPosition | None
    commit_lsn: Lsn | None

    def row(self, row: TableSync, rows: int | None) -> TableSync:
        """``row`` (the table's sync state) with where the history is once the write is made,
        holding ``rows`` rows (None: as the row says)."""
        if self.reached is None:
            return row
        return replace(
            row,
            history_version=self.reached.snapshot_version,
            history_commit=self.commit_lsn,
            history_at=self.reached.lsn,
            history_rows=rows if rows is not None else row.history_rows,
        )


def plan_history(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    target: Lsn,
    ranges: Ranges,
    sync: SourceSync,
    retired: Lsn | None,
) -> HistoryPlan:
    """What brings ``table``'s history to ``target`` (``ranges``: the chain's range keys from
    an LSN on, ``sync``: the source's sync state, ``retired``: the end of the retired ranges)."""
    row = sync[table]
    snapshot = snapshot_info(source, table)
    if snapshot is None:
        raise Failure(
            f"{table.qualified_name} has no snapshot yet: materialize the 'snapshot' partition of "
            f"{table.change_log_key.to_user_string()} first."
        )
    previous = source.store.properties(table.history_key.path, None) or {}
    committed, position = _positions(source, table, sync, previous)
    commit_lsn = committed.lsn if committed is not None else None
    if target < snapshot.snapshot_lsn:
        why = f"its snapshot is consistent from {snapshot.snapshot_lsn.hex} on"
        return HistoryPlan(None, why, {}, position, commit_lsn)
    keys = tuple(table.instance.key_columns)
    done: dict[str, Any] = {"rebased_on_snapshot": False}
    rebase = None
    if position is None or (
        position.snapshot_version != snapshot.version and position.lsn < snapshot.snapshot_lsn
    ):
        # a new history, or a re-snapshot: versions open (and close) at the snapshot LSN,
        # unless the snapshot's ranges are retired: then on the mirror's rows
        if retired is not None and snapshot.replay_from < retired:
            rebase, position = _on_mirror(spark, source, table, row, done)
        else:
            rebase, position = _on_snapshot(spark, source, table, snapshot, ranges, row)
            done["rebased_on_snapshot"] = True
    elif retired is not None and position.lsn < retired:
        rebase, position = _on_mirror(spark, source, table, row, done)
    rules = rules_properties(previous, snapshot, position.lsn if rebase is not None else None)
    if rebase is not None:
        rebase = replace(rebase, properties={**rebase.properties, **rules})
    if RULES_FROM in rules:
        done["column_rules_from_lsn"] = rules[RULES_FROM]
    rebased = None
    if rebase is not None:
        rebased = history_driver.HistoryWrite(rebase, rows_before=row.history_rows)
        commit_lsn = position.lsn
    start = position.lsn
    if start >= target:
        return HistoryPlan(rebased, f"it is already at {start.hex}", done, position, commit_lsn)
    try:
        needed = ranges_covering(ranges(start), start, target)
    except ChainGap as exc:
        raise Failure(
            f"{table.qualified_name}: cannot bring its history to {target.hex}: {exc}"
        ) from None
    try:
        rows, holding = _change_rows(source, table, needed, row, snapshot)
    except AwaitsResnapshot as waiting:
        return HistoryPlan(rebased, str(waiting), done, position, commit_lsn)
    done.update(previous_lsn=start.hex, ranges_applied=len(needed), change_rows=rows)
    reached = history_store.HistoryPosition(target, snapshot.version)
    if not rows:
        # quiet ranges: no commit; the sync state records where the history is
        return HistoryPlan(rebased, "its ranges are quiet", done, reached, commit_lsn)
    changes = history_driver.HistoryChanges(
        tuple(table.change_log_key.path),
        tuple(r.key for r in holding),
        change_rows=rows,
        key_columns=keys,
        after_lsn=start.raw,
        properties={
            "kind": "history",
            **history_store.position_properties(reached),
            "previous_lsn": start.hex,
            "applied_ranges": [r.key for r in needed],
            **rules,
        },
        tracked=tracked_columns(source, table),
        history_rows=snapshot.rows,
    )
    write = history_driver.HistoryWrite(rebase, changes, rows_before=row.history_rows)
    return HistoryPlan(write, "", done, reached, target)


def rules_properties(
    previous: Mapping[str, Any], snapshot: SnapshotInfo, rebased_at: Lsn | None
) -> dict[str, Any]:
    """The column rules the history's versions are stored under from now on (their
    fingerprint, :data:`RULES`) and the LSN from which they hold (:data:`RULES_FROM`): those its
    last commit recorded, or, when a rebase at ``rebased_at`` brings other rules (a rule added,
    changed or dropped: the table was re-snapshotted under them), the snapshot's from that LSN.
    Versions before it keep the values as stored then. Empty for a table that never had
    rules."""
    held = str(previous.get(RULES) or "")
    if rebased_at is not None and held != snapshot.column_rules:
        return {RULES: snapshot.column_rules, RULES_FROM: rebased_at.hex}
    return {k: previous[k] for k in (RULES, RULES_FROM) if previous.get(k) is not None}


def _on_snapshot(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    snapshot: SnapshotInfo,
    ranges: Ranges,
    row: TableSync,
) -> tuple[history_driver.HistoryRebase, history_store.HistoryPosition]:
    """The history built on the table's snapshot: versions open at the snapshot LSN."""
    at = snapshot.snapshot_lsn
    reached = history_store.HistoryPosition(at, snapshot.version)
    rebase = history_driver.HistoryRebase(
        _state_at_snapshot(spark, source, table, snapshot, ranges, row),
        at=at,
        at_time=_commit_time(source, at),
        key_columns=tuple(table.instance.key_columns),
        properties={"kind": "history", **history_store.position_properties(reached)},
        estimated_rows=snapshot.rows,
    )
    return rebase, reached


def _on_mirror(
    spark: SparkSession, source: Source, table: CapturedTable, row: TableSync, done: dict[str, Any]
) -> tuple[history_driver.HistoryRebase, history_store.HistoryPosition]:
    """The history built on the mirror's rows at the mirror's LSN (the ranges it needs are
    retired: module doc); a :class:`Failure` while the mirror is not built from the table's
    current snapshot."""
    found = source.store.commit_properties(table.mirror_key.path)
    committed = mirror_versions.position_of(found[1]) if found is not None else None
    at, _ = mirror_at(committed, row)
    if found is None or committed is None or at is None or not row.mirror_built:
        raise Failure(
            f"{table.qualified_name}: the ranges its history needs are retired "
            "(sync.retain_ranges), so it is rebuilt on its mirror's rows, and the mirror is not "
            "built from the table's snapshot yet; a later range run builds it."
        )
    assert committed.snapshot_version is not None
    state = source.store.read(spark, table.mirror_key.path, None, version=found[0])
    reached = history_store.HistoryPosition(at, committed.snapshot_version)
    done.update(rebased_on_mirror_at=at.hex)
    rebase = history_driver.HistoryRebase(
        state,
        at=at,
        at_time=_commit_time(source, at),
        key_columns=tuple(table.instance.key_columns),
        properties={
            "kind": "history",
            **history_store.position_properties(reached),
            "rebased_on_mirror": True,
        },
        estimated_rows=committed.rows,
    )
    return rebase, reached


def _state_at_snapshot(
    spark: SparkSession,
    source: Source,
    table: CapturedTable,
    snapshot: SnapshotInfo,
    ranges: Ranges,
    row: TableSync,
) -> DataFrame:
    """The table as of its snapshot LSN: the snapshot's rows with the changes
    (``replay_from``, ``snapshot_lsn``] applied (none for an exact snapshot)."""
    store, path = source.store, table.change_log_key.path
    base = sqlserver_source.drop_snapshot_columns(store.read(spark, path, SNAPSHOT_PARTITION))
    start, at = snapshot.replay_from, snapshot.snapshot_lsn
    if at <= start:
        return base
    ends = [r.hi for r in ranges(start) if r.hi >= at]
    if not ends:
        raise Failure(
            f"{table.qualified_name}: no range reaches its snapshot LSN {at.hex} yet; a later "
            "range builds its history."
        )
    needed = ranges_covering(ranges(start), start, min(ends))
    rows, holding = _change_rows(source, table, needed, row, snapshot)
    if not rows:
        return base
    changes = store.read_partitions(spark, path, [r.key for r in holding])
    changes = changes.where(F.col(f"`{START_LSN}`") <= F.lit(bytearray(at.raw)))
    keys = list(table.instance.key_columns)
    if keys:
        return rows_after_keyed_changes(base, changes, key_columns=keys, snapshot_lsn=start.raw)
    return rows_after_multiset_changes(base, changes, snapshot_lsn=start.raw)


def _change_rows(
    source: Source,
    table: CapturedTable,
    needed: list[LsnRange],
    row: TableSync,
    snapshot: SnapshotInfo,
) -> tuple[int, list[LsnRange]]:
    """How many change rows ``needed`` holds for the table and the ranges that hold some,
    after checking each range is written and covered, or was quiet for the table: a range
    without a partition in the change log that the table's mirror has passed, built on the
    same snapshot (the run's change-log step proved it quiet and moved the mirror on in the
    sync state, :mod:`.quiet_ranges`)."""
    path = table.change_log_key.path
    passed = row.mirror_at if row.mirror_version == snapshot.version else None
    rows, holding = 0, []
    for lsn_range in needed:
        found = range_of(source.store.properties(path, lsn_range.key))
        if found is None:
            if passed is not None and passed >= lsn_range.hi:
                continue  # quiet for the table
            waiting = awaited_resnapshot(source, table, snapshot, lsn_range.key)
            if waiting is not None:
                raise waiting
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} has not been materialized for "
                f"{table.change_log_key.to_user_string()}; materialize that partition first (the "
                "history never skips a range)."
            )
        if found.coverage is None or not found.coverage.ok:
            reason = (found.coverage and found.coverage.reason) or "no coverage recorded"
            raise Failure(
                f"{table.qualified_name}: range {lsn_range.key} failed its coverage check "
                f"({reason}); the history is left as it is. Re-snapshot the table to continue."
            )
        count = found.rows if found.rows is not None else 1  # unknown: read the range
        rows += count
        if count:
            holding.append(lsn_range)
    return rows, holding


def _commit_time(source: Source, at: Lsn) -> dt.datetime | None:
    conn = source.connect()
    try:
        return commit_time_at_or_before(conn, at)
    finally:
        conn.close()
