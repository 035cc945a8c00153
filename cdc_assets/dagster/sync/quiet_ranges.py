"""Quiet tables: the tables of a source a range run does not work on, recorded in one go.

The sync sensor sends a range run to the tables that changed in the range (and those whose
mirror must be built); the rest of the source is quiet. The change-log step of the run records
the range for every quiet table whose mirror stands at the range's start, after proving it:

1. one statement counts the change rows of each table's capture instance in ``(lo, hi]``
   (:func:`~cdc_assets.sqlserver.changed_tables.changed_instances`): none;
2. after the count, the instance's validity interval still starts at or below ``lo + 1`` and
   the max LSN is at or above ``hi`` (one query each): cleanup removed nothing under the count;
3. the instance is the one the table's snapshot was taken with (a newer one — a schema change —
   goes through the normal path, which re-snapshots the table).

Recording is one write of the sync state for all of them (:mod:`.sync_state`): the mirror's
position (and its history's, where the table has one) moves to ``hi`` with no Spark job and no
Delta commit of its own. What Dagster hears:
in a source of up to 50 tables, each quiet table's range (its change log, mirror and history
partitions, 0 rows, "quiet"), so no partition stays missing; in a larger one, a quiet mirror's
(and history's) range when its last report is older than half the freshness policy's warning
window, so a quiet mirror is never shown overdue while its sync is healthy (a thousand tables
would otherwise be thousands of events per range; their change logs show partitions where the
table changed).

A table that fails any of the three stays where it was: the sensor
finds it behind and sends it a run of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from dagster import AssetMaterialization, MetadataValue

from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import SourceTable, get_max_lsn
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.changed_tables import (
    changed_instances,
    established_instances,
    instance_starts,
)
from cdc_assets.sqlserver.column_masks import rules_fingerprint
from cdc_assets.sqlserver.dbapi import DbapiConnection

from .source import CapturedTable, Source
from .sync_state import SourceSync, TableSync, now


def quiet_instance(
    found: SourceTable | None, row: TableSync, lsn_range: LsnRange, *, ahead: bool = False
) -> CaptureInstance | None:
    """The capture instance whose change rows tell whether the table changed in the range, if
    the table may be recorded quiet at all: its mirror is built and at the range's start (or,
    ``ahead``, before it: the run of the range before is in flight), and no newer instance
    than its snapshot's exists."""
    if found is None or row.snapshot is None or not row.mirror_built:
        return None
    if row.mirror_at != lsn_range.lo and not (
        ahead and row.mirror_at is not None and row.mirror_at < lsn_range.lo
    ):
        return None
    current = found.current_instance
    taken_with = row.snapshot.capture_instance
    if current is None or (taken_with and current.name != taken_with):
        return None
    if row.snapshot.column_rules != rules_fingerprint(current):
        return None  # the column rules changed: the normal path re-snapshots the table
    return found.instance_covering(lsn_range.first) or current


# Sources up to this many tables report every quiet table's range to Dagster (2 events each),
# so each partition shows materialized; larger ones report quiet mirrors now and then only.
REPORT_EVERY_RANGE_UP_TO = 50
REPORTS_PER_RANGE = 100  # quiet mirrors reported in one range, in a larger source


def heartbeat_seconds(source: Source) -> float:
    """How long a quiet mirror goes without a Dagster materialization: half the freshness
    policy's warning window."""
    warn, _ = source.config.sync.freshness_windows()
    return warn / 2


def quiet_tables(
    conn: DbapiConnection,
    catalog: Mapping[tuple[str, str], SourceTable],
    sync: SourceSync,
    tables: Sequence[CapturedTable],
    lsn_range: LsnRange,
) -> list[CapturedTable]:
    """Those of ``tables`` proven quiet in ``lsn_range`` with their mirror at its start."""
    candidates = {}
    for table in tables:
        found = catalog.get((table.schema, table.name))
        instance = quiet_instance(found, sync[table], lsn_range)
        if instance is not None:
            candidates[table] = instance
    if not candidates:
        return []
    names = sorted({i.name for i in candidates.values()})
    counts = changed_instances(conn, names, lsn_range, among=established_instances(catalog))
    starts = instance_starts(conn)  # after the count: cleanup removed nothing under it
    if get_max_lsn(conn) < lsn_range.hi:
        return []
    quiet = []
    for table, instance in candidates.items():
        start = starts.get(instance.name)
        if counts.get(instance.name) == 0 and start is not None and start <= lsn_range.first:
            quiet.append(table)
    return quiet


def record_quiet(
    source: Source,
    sync: SourceSync,
    quiet: Sequence[CapturedTable],
    lsn_range: LsnRange,
    partition: str,
    range_metadata: Callable[[], Mapping[str, Any]],
) -> tuple[dict[CapturedTable, TableSync], list[AssetMaterialization]]:
    """The sync state rows of the ``quiet`` tables moved to ``hi``, and what Dagster hears of
    them: in a source of at most :data:`REPORT_EVERY_RANGE_UP_TO` tables, the range of each
    (change log and mirror: 0 rows, quiet), so every partition shows materialized; in a larger
    one, a quiet mirror when Dagster has not heard of it for a while (a source of a thousand
    tables would otherwise log thousands of events per range). ``range_metadata``: what the
    change-log reports show of the range (asked once, when there are any)."""
    updates: dict[CapturedTable, TableSync] = {}
    reports: list[AssetMaterialization] = []
    moment = now()
    every_range = len(source.tables) <= REPORT_EVERY_RANGE_UP_TO
    due = set(quiet) if every_range else _due(source, sync, quiet, moment)
    shown = dict(range_metadata()) if every_range and quiet else {}
    for table in quiet:
        row = sync[table]
        reported = row.reported_at
        # its history moves with it where it stood at the range's start (one behind catches
        # up in a run of its own: :mod:`..range_lane`)
        history = source.has_history(table) and row.history_reached(lsn_range.lo)
        if every_range:
            reports.append(_change_log_report(table, lsn_range, partition, shown))
        if table in due:
            reports.append(_report(table, row, lsn_range, partition))
            if history:
                reports.append(_report(table, row, lsn_range, partition, history=True))
            reported = moment
        updates[table] = replace(
            row,
            mirror_at=lsn_range.hi,
            reported_at=reported,
            history_at=lsn_range.hi if history else row.history_at,
        )
    return updates, reports


def _due(
    source: Source, sync: SourceSync, quiet: Sequence[CapturedTable], moment: float
) -> set[CapturedTable]:
    """The quiet mirrors to report in this range: those not reported for half the warning
    window, the longest unreported first, at most :data:`REPORTS_PER_RANGE` (so a thousand
    tables' reports spread over ranges instead of all falling due in one)."""
    limit = heartbeat_seconds(source)
    waiting = [t for t in quiet if (r := sync[t].reported_at) is None or moment - r >= limit]
    waiting.sort(key=lambda t: sync[t].reported_at or 0.0)
    return set(waiting[:REPORTS_PER_RANGE])


def _change_log_report(
    table: CapturedTable, lsn_range: LsnRange, partition: str, shown: Mapping[str, Any]
) -> AssetMaterialization:
    return AssetMaterialization(
        asset_key=table.change_log_key,
        partition=partition,
        description=f"{table.qualified_name} had no changes in ({lsn_range.lo.hex}, "
        f"{lsn_range.hi.hex}]: nothing to write (recorded quiet in the sync state)",
        metadata={
            "dagster/row_count": 0,
            "quiet": True,
            "lsn_range": f"({lsn_range.lo.hex}, {lsn_range.hi.hex}]",
            **shown,
        },
    )


def _report(
    table: CapturedTable,
    row: TableSync,
    lsn_range: LsnRange,
    partition: str,
    *,
    history: bool = False,
) -> AssetMaterialization:
    """A quiet mirror's report (``history``: its history's)."""
    what = "history" if history else "mirror"
    commit = row.history_commit if history else row.mirror_commit
    rows = row.history_rows if history else row.mirror_rows
    since = commit.hex if commit is not None else "its snapshot"
    return AssetMaterialization(
        asset_key=table.history_key if history else table.mirror_key,
        partition=partition,
        description=f"{table.qualified_name} had no changes since {since}: the {what} is at "
        f"{lsn_range.hi.hex} as it is (no Delta commit)",
        metadata={
            f"{what}_lsn": lsn_range.hi.hex,
            "quiet": True,
            "unchanged_since_lsn": MetadataValue.text(since),
            **({"dagster/row_count": rows} if rows is not None else {}),
        },
    )
