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
            row = tuple(change[c] for c in columns)
            versions.append(Version(row, lsn, end, times[lsn], times.get(end) if end else None))
    return versions


def _multiset_versions(
    ordered: list[dict[str, Any]], times: dict[bytes, dt.datetime], columns: Sequence[str]
) -> list[Version]:
    net: dict[tuple[Any, ...], dict[bytes, int]] = defaultdict(lambda: defaultdict(int))
    for change in ordered:
        row = tuple(change[c] for c in columns)
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
