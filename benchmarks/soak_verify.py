"""The soak benchmark's last check (see :mod:`soak`): once the workload has stopped and every
mirror holds the last commit, each mirror and each history against the source.

- A **mirror** read by DuckDB (its Delta extension reads deletion vectors) equals the table
  read from the source now, through the project's reader with the table's current capture
  instance and column rules (what a snapshot of it would store: masked values, stored types),
  as a multiset of rows.
- A **history** against a replay of the change table (``cdc_assets_tests/support/
  history_replay.py``): the emulated CDC cleanup keeps only the last minutes of changes, so the
  replay starts at ``L``, the highest of the table's newest snapshot LSN (a re-snapshot rebuilds
  the history's present from there) and the capture instance's minimum LSN. The history's rows
  valid at ``L`` are taken as the replay's start (inserted at ``L``), the change rows ``(L, last]``
  (read with the same reader: masked, stored types) applied on them, and the versions this
  gives must be exactly the history's versions valid at or after ``L`` (cut at ``L``: row,
  start LSN, end LSN); its current versions must equal the source table.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_assets.dagster.history import history_position
from cdc_assets.dagster.sync.change_log_state import snapshot_info
from cdc_assets.dagster.sync.source import CapturedTable, Source
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark.history_store import END_LSN_COLUMN, START_LSN_COLUMN
from cdc_assets.spark.sqlserver_source import (
    SNAPSHOT_LSN,
    plan_snapshot,
    read_changes_in_driver,
    read_snapshot_in_driver,
)
from cdc_assets.spark.stored_columns import time_text
from cdc_assets.sqlserver import get_min_lsn, last_transaction_lsn
from cdc_assets_tests.support.history_replay import Version, as_of, cut_at, replay_versions
from cdc_assets_tests.support.outside_spark import multiset, normal_value, read_with_duckdb

INSERT = 2


def stored_alike(table: pa.Table) -> pa.Table:
    """Rows read from the source with their ``time`` columns as the Delta tables store them
    (text: :func:`cdc_assets.spark.stored_columns.time_text`)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_time(field.type):
            table = table.set_column(i, field.name, time_text(table.column(i)))
    return table


def _rows(table: pa.Table, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    return [tuple(normal_value(row[c]) for c in columns) for row in table.to_pylist()]


def source_rows(source: Source, table: CapturedTable) -> list[tuple[Any, ...]]:
    """The table now, read as a snapshot reads it (masked, stored types)."""
    settings = source.config.connection_settings()
    found = read_snapshot_in_driver(plan_snapshot(settings, table.instance, mode="exact"))
    found = found.filter(pc.field(SNAPSHOT_LSN).is_null())
    return _rows(stored_alike(found), table.instance.column_names)


def compare_mirror(source: Source, table: CapturedTable, want: Counter) -> str:
    columns = list(table.instance.column_names)
    location = source.store.location(table.mirror_key.path)
    found = multiset(read_with_duckdb(location, columns))
    return _difference(found, want)


def _difference(found: Counter, want: Counter, show: Callable[[tuple[Any, ...]], str] = str) -> str:
    if found == want:
        return "equal"
    extra, missing = found - want, want - found
    first = [show(next(iter(rows)))[:160] if rows else "-" for rows in (extra, missing)]
    example = f" (e.g. {first[0]} / {first[1]})"
    return (
        f"{sum(extra.values())} rows only in the store, {sum(missing.values())} only in the "
        f"source{example}"
    )


def compare_history(source: Source, table: CapturedTable, want: Counter, last: Lsn) -> str:
    instance = table.instance
    columns = list(instance.column_names)
    snapshot = snapshot_info(source, table)
    if snapshot is None:
        return "no snapshot"
    conn = source.connect()
    try:
        start = max(snapshot.snapshot_lsn, get_min_lsn(conn, instance.name))
    finally:
        conn.close()
    location = source.store.location(table.history_key.path)
    try:
        stored = read_with_duckdb(
            location,
            [*columns, START_LSN_COLUMN, END_LSN_COLUMN],
            f"{END_LSN_COLUMN} IS NULL OR {END_LSN_COLUMN} > ?",
            [start.raw],
        )
    except Exception as exc:  # a column the history does not have, say
        return (
            f"not readable with the columns of {instance.name}: {' '.join(str(exc).split())[:200]}"
        )
    width = len(columns)
    versions = [
        Version(
            tuple(normal_value(v) for v in r[:width]),
            bytes(r[width]),
            _lsn(r[width + 1]),
            None,
            None,
        )
        for r in stored
    ]
    current = multiset(v.row for v in versions if v.current)
    if current != want:
        return "current versions: " + _difference(current, want)
    changes: list[dict[str, Any]] = []
    if start < last:
        found = read_changes_in_driver(
            source.config.connection_settings(), instance, LsnRange(start, last)
        )
        for row in stored_alike(found).to_pylist():
            change = {c: normal_value(row[c]) for c in columns}
            for meta in ("__$start_lsn", "__$seqval", "__$command_id", "__$operation"):
                change[meta] = row[meta]
            change["__$start_lsn"] = bytes(change["__$start_lsn"])
            change["__$seqval"] = bytes(change["__$seqval"])
            changes.append(change)
    initial = [
        {**dict(zip(columns, row, strict=True)), **_inserted_at(start.raw)}
        for row in as_of(versions, start.raw)
    ]
    times = {c["__$start_lsn"]: None for c in [*initial, *changes]}
    expected = replay_versions(
        [*initial, *changes],
        times,
        columns,
        list(instance.key_columns),  # type: ignore[arg-type]
    )
    found_rows, expected_rows = _as_rows(cut_at(versions, start, None)), _as_rows(expected)
    return _difference(found_rows, expected_rows, _version_text)


def _version_text(row: tuple[Any, ...]) -> str:
    """A version as ``first column, ..., start LSN, end LSN`` (what tells versions apart)."""
    start, end = row[-2], row[-1]
    lsns = f"{start.hex() if start else None}-{end.hex() if end else None}"
    return f"({row[0]!r}, ..., {lsns})"


def _inserted_at(lsn: bytes) -> dict[str, Any]:
    return {"__$start_lsn": lsn, "__$seqval": b"", "__$command_id": 0, "__$operation": INSERT}


def _lsn(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _as_rows(versions: Sequence[Version]) -> Counter:
    return Counter((*v.row, v.start, v.end) for v in versions)


def verify(source: Source, stop: Callable[[], bool]) -> dict[str, str]:
    """``mirror <table>`` and ``history <table>`` → ``equal`` or what differs (``stop``: give up
    between tables, the soak is ending)."""
    conn = source.connect()
    try:
        last = last_transaction_lsn(conn)
    finally:
        conn.close()
    results: dict[str, str] = {}
    for table in source.tables:
        if stop():
            break
        try:
            want = multiset(source_rows(source, table))
        except Exception as exc:
            results[f"mirror {table.name}"] = f"source not read: {exc}"
            continue
        results[f"mirror {table.name}"] = _guarded(compare_mirror, source, table, want)
        if table in source.history_tables and last is not None:
            position = history_position(source, table)
            text = _guarded(compare_history, source, table, want, last)
            if text != "equal" and position is not None:
                text += f" (history at LSN {position.lsn.hex})"
            results[f"history {table.name}"] = text
    return results


def _guarded(check: Callable[..., str], *args: Any) -> str:
    try:
        return check(*args)
    except Exception as exc:
        return f"check failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
