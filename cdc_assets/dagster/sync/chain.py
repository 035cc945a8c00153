"""The LSN chain of a source, derived from its partition keys (DESIGN.md section 4).

Stateless on purpose: a restarted daemon, a rerun or a backfill sees the same chain because it
is read from the keys, never from a cursor. Range keys are ``<lo>-<hi>`` with fixed-width hex, so
sorting the keys sorts the ranges.

Reading the chain costs what is read, not how many keys exist: the sensor adds range keys in chain
order, so the newest keys (by insertion) hold the chain's end, and a run needs only the ranges
after the LSN its mirrors are at. :func:`recent_ranges` reads the keys newest first, a page at a
time, until it reaches the LSN asked for. Retired ranges (``sync.retain_ranges``) are deleted from
Dagster; the LSN the chain continues from after them is kept in the instance's key-value store
(:func:`retired_through`), next to the keys themselves.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dagster import DagsterInstance

from cdc_assets.lsn import Lsn, LsnRange

from .names import SNAPSHOT_PARTITION


class ChainGap(Exception):
    """The ranges do not tile the LSNs they must cover."""


def range_partitions(keys: Iterable[str]) -> list[LsnRange]:
    """The range keys among ``keys`` as ranges, in LSN order (``snapshot`` and others ignored)."""
    return sorted(
        (LsnRange.parse_key(k) for k in keys if k != SNAPSHOT_PARTITION and LsnRange.is_key(k)),
        key=lambda r: (r.lo, r.hi),
    )


def chain_end(ranges: Sequence[LsnRange]) -> Lsn | None:
    return max((r.hi for r in ranges), default=None)


PAGE = 64  # keys per read; a page holds the chain's end even with a few keys added out of order


def recent_ranges(
    instance: DagsterInstance, partitions_name: str, reach: Lsn | None = None
) -> list[LsnRange]:
    """The newest range partitions, in LSN order: the newest page of keys, and when ``reach`` is
    given, older pages too until one holds a range starting below ``reach`` (or the chain's
    retired start is reached), so every range after ``reach`` and the one ending at it are in.
    Cost: the keys read, never all of them while the chain is read from its end."""
    floor = retired_through(instance, partitions_name) if reach is not None else None
    found: list[LsnRange] = []
    cursor: str | None = None
    while True:
        page = instance.get_paginated_dynamic_partitions(
            partitions_name, limit=PAGE, ascending=False, cursor=cursor
        )
        ranges = range_partitions(page.results)
        found.extend(ranges)
        if (
            reach is None
            or not page.has_more
            or any(r.lo < reach or (floor is not None and r.lo <= floor) for r in ranges)
        ):
            return sorted(set(found), key=lambda r: (r.lo, r.hi))
        cursor = page.cursor


class RangeReader:
    """:func:`recent_ranges` for many tables at once (a step's mirrors, the sensor's tables
    behind): the keys back to the LSN asked for, read once, and again only when a table lags
    further behind than the last read reached. Thread-safe."""

    def __init__(self, instance: DagsterInstance, partitions_name: str) -> None:
        self._instance = instance
        self._name = partitions_name
        self._lock = threading.Lock()
        self._known: list[LsnRange] | None = None  # the last read, if any

    def __call__(self, start: Lsn) -> list[LsnRange]:
        with self._lock:
            known = self._known
            if known is None or not any(r.lo <= start for r in known):
                known = recent_ranges(self._instance, self._name, reach=start)
                self._known = known
            return known


def _added_key(partitions_name: str) -> str:
    return f"cdc_assets/{partitions_name}/newest_added"


def add_partition(instance: DagsterInstance, partitions_name: str, key: str) -> None:
    """Add ``key`` to the source's partitions; a range's moment is noted first (the chain-end
    checks tell a range the sensor has just added, whose run is being asked for, from one left
    without a run: :mod:`.chain_end_check`), so whoever sees the key can see when it came."""
    if key != SNAPSHOT_PARTITION and LsnRange.is_key(key):
        noted = f"{key} {time.time():.3f}"
        instance.run_storage.set_cursor_values({_added_key(partitions_name): noted})
    instance.add_dynamic_partitions(partitions_name, [key])


def newest_added(instance: DagsterInstance, partitions_name: str) -> tuple[str, float] | None:
    """The newest range :func:`add_partition` added, and when (seconds since the epoch)."""
    key = _added_key(partitions_name)
    value = instance.run_storage.get_cursor_values({key}).get(key)
    if not value:
        return None
    added, _, moment = value.partition(" ")
    return added, float(moment)


def _retired_key(partitions_name: str) -> str:
    return f"cdc_assets/{partitions_name}/retired_through"


def retired_through(instance: DagsterInstance, partitions_name: str) -> Lsn | None:
    """The end of the last range partition deleted by retention: the chain continues from it."""
    key = _retired_key(partitions_name)
    value = instance.run_storage.get_cursor_values({key}).get(key)
    return Lsn.parse(value) if value else None


def retire(instance: DagsterInstance, partitions_name: str, ranges: Sequence[LsnRange]) -> None:
    """Delete ``ranges`` (the oldest of the chain, in order) from Dagster. Their end is recorded
    first, so a crash half way leaves keys the chain still accepts, never a chain without start."""
    if not ranges:
        return
    end = max(r.hi for r in ranges)
    before = retired_through(instance, partitions_name)
    if before is None or end > before:
        instance.run_storage.set_cursor_values({_retired_key(partitions_name): end.hex})
    for r in ranges:
        instance.delete_dynamic_partition(partitions_name, r.key)


def ranges_covering(ranges: Sequence[LsnRange], start: Lsn, end: Lsn) -> list[LsnRange]:
    """The ranges that carry the changes ``(start, end]``, in order, contiguous; :class:`ChainGap`
    if some LSN in between is in none of them or ``end`` is not a range end."""
    if end <= start:
        return []
    needed = [r for r in ranges if r.hi > start and r.hi <= end]
    if not needed:
        raise ChainGap(f"no range partition holds the changes after {start.hex}")
    if needed[0].lo > start:
        raise ChainGap(
            f"the changes ({start.hex}, {needed[0].lo.hex}] are in no range partition: the first "
            f"range after {start.hex} starts at {needed[0].lo.hex}"
        )
    for previous, current in itertools.pairwise(needed):
        if current.lo != previous.hi:
            raise ChainGap(
                f"range {current.key} does not continue {previous.key}: the chain has a gap or "
                "an overlap"
            )
    if needed[-1].hi != end:
        raise ChainGap(f"no range partition ends at {end.hex}")
    return needed


@dataclass(frozen=True)
class SnapshotInfo:
    """What a table's published snapshot says: changes above ``replay_from`` must be applied, and
    the state is consistent from ``snapshot_lsn`` on (equal for an exact snapshot)."""

    replay_from: Lsn
    snapshot_lsn: Lsn
    mode: str
    version: str
    capture_instance: str = ""
    rows: int | None = field(default=None, compare=False)  # the snapshot's row count
    column_rules: str = ""  # the fingerprint of the column rules it was read with

    @classmethod
    def from_properties(
        cls, properties: dict[str, Any] | None, version: str | None
    ) -> SnapshotInfo | None:
        if not properties or version is None or "snapshot_lsn" not in properties:
            return None
        return cls(
            Lsn.parse(properties["replay_from"]),
            Lsn.parse(properties["snapshot_lsn"]),
            str(properties.get("mode", "")),
            version,
            str(properties.get("capture_instance", "")),
            rows if isinstance(rows := properties.get("rows"), int) else None,
            str(properties.get("column_rules") or ""),
        )


def effective_range(lsn_range: LsnRange, snapshot: SnapshotInfo | None) -> LsnRange | None:
    """The part of ``lsn_range`` the table needs beyond its snapshot; None if it needs none."""
    if snapshot is None or snapshot.replay_from <= lsn_range.lo:
        return lsn_range
    if snapshot.replay_from >= lsn_range.hi:
        return None
    return LsnRange(snapshot.replay_from, lsn_range.hi)
