"""Plain-Python versions of a table replayed from its change table: the reference a history
(SCD type 2) must equal.

``cdc.<capture instance>_CT`` is read directly (the rows SQL Server's capture job wrote) with
``cdc.lsn_time_mapping`` for the commit times. Keyed tables: per key and transaction (commit
LSN) the key's last change in the transaction is its state; every transaction that left the key
present opens a version, every later transaction of the key (also a delete) closes it. Keyless
tables: per distinct row and transaction the net count opens versions or closes the oldest open
ones. The versions are then cut at the snapshot LSN the history starts from: those ended by then
are unknown to it, those alive then start at it.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver.quoting import quote_name
from cdc_assets_tests.support.replay import change_order

DELETE, INSERT, BEFORE, AFTER = 1, 2, 3, 4


@dataclass(frozen=True)
class Version:
    row: tuple[Any, ...]
    start: bytes
    end: bytes | None
    start_at: dt.datetime | None
    end_at: dt.datetime | None

    @property
    def current(self) -> bool:
        return self.end is None


def read_change_table(
    conn: Any, capture_instance: str
) -> tuple[list[dict[str, Any]], dict[bytes, dt.datetime]]:
    """The change table's rows (dicts) and each transaction's commit time."""
    cursor = conn.cursor()
    try:
        cursor.execute(f"SELECT * FROM cdc.{quote_name(capture_instance + '_CT')}")
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
        cursor.execute("SELECT start_lsn, tran_end_time FROM cdc.lsn_time_mapping")
        times = {bytes(lsn): at for lsn, at in cursor.fetchall()}
    finally:
        cursor.close()
    for row in rows:
        row["__$start_lsn"] = bytes(row["__$start_lsn"])
        row["__$seqval"] = bytes(row["__$seqval"])
    return rows, times


def replay_versions(
    changes: list[dict[str, Any]],
    times: dict[bytes, dt.datetime],
    columns: Sequence[str],
    key_columns: Sequence[str],
) -> list[Version]:
    """Every version of the table from its first captured change on."""
    ordered = sorted(changes, key=change_order)
    if not key_columns:
        return _multiset_versions(ordered, times, columns)
    last: dict[tuple[Any, ...], dict[bytes, dict[str, Any]]] = defaultdict(dict)
    for change in ordered:
        if change["__$operation"] == BEFORE:
            continue
        key = tuple(change[k] for k in key_columns)
        last[key][change["__$start_lsn"]] = change  # the last one of the transaction wins
    versions = []
    for per_transaction in last.values():
        lsns = sorted(per_transaction)
        for i, lsn in enumerate(lsns):
            change = per_transaction[lsn]
            if change["__$operation"] == DELETE:
                continue
            end = lsns[i + 1] if i + 1 < len(lsns) else None
            row = tuple(change.get(c) for c in columns)  # a column the instance lacks: None
            versions.append(Version(row, lsn, end, times[lsn], times.get(end) if end else None))
    return versions


def _multiset_versions(
    ordered: list[dict[str, Any]], times: dict[bytes, dt.datetime], columns: Sequence[str]
) -> list[Version]:
    net: dict[tuple[Any, ...], dict[bytes, int]] = defaultdict(lambda: defaultdict(int))
    for change in ordered:
        row = tuple(change.get(c) for c in columns)
        sign = -1 if change["__$operation"] in (DELETE, BEFORE) else 1
        net[row][change["__$start_lsn"]] += sign
    versions = []
    for row, per_transaction in net.items():
        open_ones: deque[bytes] = deque()
        for lsn in sorted(per_transaction):
            count = per_transaction[lsn]
            open_ones.extend([lsn] * max(count, 0))
            for _ in range(-count):
                start = open_ones.popleft()
                versions.append(Version(row, start, lsn, times[start], times[lsn]))
        versions.extend(Version(row, s, None, times[s], None) for s in open_ones)
    return versions


def cut_at(versions: list[Version], at: Lsn, at_time: dt.datetime | None) -> list[Version]:
    """The versions a history started at ``at`` holds: those alive at ``at`` start there."""
    found = []
    for v in versions:
        if v.end is not None and v.end <= at.raw:
            continue
        if v.start <= at.raw:
            v = replace(v, start=at.raw, start_at=at_time)
        found.append(v)
    return found


def as_of(versions: list[Version], lsn: bytes) -> list[tuple[Any, ...]]:
    """The rows valid at ``lsn``."""
    return [v.row for v in versions if v.start <= lsn and (v.end is None or v.end > lsn)]


def as_of_time(versions: list[Version], at: dt.datetime) -> list[tuple[Any, ...]]:
    """The rows valid at commit time ``at``."""
    return [
        v.row
        for v in versions
        if v.start_at is not None and v.start_at <= at and (v.end_at is None or v.end_at > at)
    ]


def replay_across(
    changes: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    times: dict[bytes, dt.datetime],
    columns: Sequence[str],
    key_columns: Sequence[str],
    *,
    start: tuple[Lsn, dt.datetime | None],
    until: Lsn,
    switch: tuple[Lsn, dt.datetime | None, dict[tuple[Any, ...], tuple[Any, ...]]],
) -> list[Version]:
    """A keyed table's versions across two capture instances (``changes``: their change
    tables' rows, ``columns``: those of both, None where an instance lacks one): the first
    instance's changes up to ``until`` from a history started at ``start`` (LSN, commit time),
    then at the second instance's snapshot ``switch`` (LSN, commit time, the rows then by key)
    the rows that differ close and open again (those gone close), then the second instance's
    changes after it."""
    first, second = changes
    (s1, t1), (s2, t2, state) = start, switch
    kept = [c for c in first if c["__$start_lsn"] <= until.raw]
    versions = cut_at(replay_versions(kept, times, columns, key_columns), s1, t1)
    index = [list(columns).index(k) for k in key_columns]
    found = [v for v in versions if not v.current]
    current: dict[tuple[Any, ...], Version] = {}
    for v in versions:
        if not v.current:
            continue
        key = tuple(v.row[i] for i in index)
        if state.get(key) == v.row:
            current[key] = v
        else:
            found.append(replace(v, end=s2.raw, end_at=t2))
    for key, row in state.items():
        current.setdefault(key, Version(row, s2.raw, None, t2, None))
    later = [c for c in second if c["__$start_lsn"] > s2.raw]
    firsts: dict[tuple[Any, ...], bytes] = {}
    for change in sorted(later, key=change_order):
        firsts.setdefault(tuple(change.get(k) for k in key_columns), change["__$start_lsn"])
    for key, v in current.items():
        ends = firsts.get(key)
        found.append(replace(v, end=ends, end_at=times[ends]) if ends is not None else v)
    return found + replay_versions(later, times, columns, key_columns)
