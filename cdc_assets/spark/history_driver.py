"""A small range applied to a history in the driver, with deletion vectors: what
:func:`.history_store.apply_changes`'s Spark MERGE commits, without its Spark jobs.

The same commit :mod:`.merge_with_deletion_vectors` makes for a mirror (its log reading, file
matching, vector, Parquet and commit writing are used as they are): the range's versions are
computed in Arrow and Python (per key and transaction the key's last state; each opens a version
that the key's next transaction closes; with ``track_history_columns``, a transaction that
changed none of them updates the version it belongs to instead), the files whose key statistics
can hold a changed key are read (key columns and ``__is_current``) to find the changed keys'
current versions, those rows are deleted by vectors and written again closed (or updated), with
the new versions, in one Parquet file; the change feed has the rewritten versions as update
pre- and postimages and the new ones as inserts. None, nothing committed, where Spark must do
it (what the mirror's driver merge leaves to Spark). A keyless history's range is applied in
the driver by :mod:`.history_multiset`, the same way; :func:`apply` chooses.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import CHANGE_ORDER, OPERATION, START_LSN, Lsn

from . import deletion_vector_commits, deletion_vector_files, history_multiset, history_store
from . import merge_with_deletion_vectors as dv
from .asset_store import AssetStore
from .commit_metadata import Published
from .deletion_vector_commits import deletion_vectors_turned_on
from .delta_location import is_local, local_path
from .driver_writes import RowsInDriver
from .history_store import (
    COMMIT_TIME,
    END_AT,
    END_LSN_COLUMN,
    IS_CURRENT,
    START_AT,
    START_LSN_COLUMN,
)
from .mirror_merge import BEFORE_IMAGE, DELETE
from .mirror_store import rows_after
from .spark_merges import turn_on_mirror_properties
from .stored_columns import encode_rows, stored_name

# A range of at most this many change rows is applied here (as a mirror's, DRIVER_MERGE_ROWS).
DRIVER_HISTORY_ROWS = 100_000
ROWS = "rows"  # in a written history's properties: its rows (versions) after the write


@dataclass(frozen=True)
class HistoryRebase:
    """The history built on ``state``, the table as of its snapshot LSN ``at``
    (:func:`.history_store.rebase`)."""

    state: DataFrame
    at: Lsn
    at_time: dt.datetime | None
    key_columns: tuple[str, ...]
    properties: Mapping[str, Any]
    estimated_rows: int | None = None


@dataclass(frozen=True)
class HistoryChanges:
    """Range partitions of a change log applied to the history (:func:`apply`)."""

    change_log: tuple[str, ...]
    partitions: tuple[str, ...]
    change_rows: int
    key_columns: tuple[str, ...]
    after_lsn: bytes | None
    properties: Mapping[str, Any]
    tracked: tuple[str, ...] | None = None
    history_rows: int | None = None


@dataclass(frozen=True)
class HistoryWrite:
    """A history brought forward: built on a new snapshot (``rebase``), then the range's
    ``changes`` applied, a commit each; the last commit is returned, its properties holding the
    history's rows after it (:data:`ROWS`: ``rows_before``, the rows before, and what the
    commits inserted and deleted; counted when one of them is not known)."""

    rebase: HistoryRebase | None = None
    changes: HistoryChanges | None = None
    rows_before: int | None = None

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        published: Published | None = None
        rows = self.rows_before
        if (r := self.rebase) is not None:
            published = history_store.rebase(
                spark,
                store,
                key_path,
                r.state,
                at=r.at,
                at_time=r.at_time,
                key_columns=r.key_columns,
                properties=r.properties,
                estimated_rows=r.estimated_rows,
            )
            written = published.properties.get(ROWS)  # a new history: its rows counted
            rows = written if isinstance(written, int) else rows_after(rows, published.metrics)
        if (c := self.changes) is not None:
            published = apply(
                spark,
                store,
                key_path,
                c.change_log,
                c.partitions,
                change_rows=c.change_rows,
                key_columns=c.key_columns,
                after_lsn=c.after_lsn,
                properties=c.properties,
                tracked=c.tracked,
                history_rows=c.history_rows,
            )
            rows = rows_after(rows, published.metrics)
        assert published is not None, "a history write rebases or applies changes"
        if rows is None:
            rows = spark.read.format("delta").load(published.uri).count()
        return replace(published, properties={**published.properties, ROWS: rows})


def apply(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    change_log: Sequence[str],
    partitions: Sequence[str],
    *,
    change_rows: int,
    key_columns: Sequence[str],
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
    tracked: Sequence[str] | None = None,
    history_rows: int | None = None,
) -> Published:
    """The range partitions ``partitions`` of ``change_log`` (``change_rows`` rows) applied to
    the history at ``key_path``: the one place that chooses how. A range of at most
    :data:`DRIVER_HISTORY_ROWS` rows that the driver reads is applied here (keyed:
    :func:`apply_changes`, ``tracked`` columns too; keyless: :func:`.history_multiset.
    apply_changes_in_driver`; a history created small, by delta-rs, gets deletion vectors
    first, in the driver too); otherwise Spark's MERGE (:func:`.history_store.apply_changes`,
    :func:`.history_multiset.apply_changes`)."""
    if change_rows <= DRIVER_HISTORY_ROWS:
        found = store.rows_in_driver(change_log, partitions)
        if found is not None:
            _turn_on_deletion_vectors(spark, store, key_path)
            published = (
                apply_changes(
                    store,
                    key_path,
                    found,
                    key_columns=key_columns,
                    after_lsn=after_lsn,
                    properties=properties,
                    tracked=tracked,
                )
                if key_columns
                else history_multiset.apply_changes_in_driver(
                    store, key_path, found, after_lsn=after_lsn, properties=properties
                )
            )
            if published is not None:
                return published
    changes = store.read_partitions(spark, change_log, partitions)
    if not key_columns:
        return history_multiset.apply_changes(
            spark, store, key_path, changes, after_lsn=after_lsn, properties=properties
        )
    return history_store.apply_changes(
        spark,
        store,
        key_path,
        changes,
        key_columns=key_columns,
        after_lsn=after_lsn,
        properties=properties,
        tracked=tracked,
        history_rows=history_rows,
    )


def _turn_on_deletion_vectors(
    spark: SparkSession, store: AssetStore, key_path: Sequence[str]
) -> None:
    """Deletion vectors for a history created small, by delta-rs: the commit Spark's ``ALTER
    TABLE`` makes, made in the driver where the table is local and its log one the driver
    writes, else by Spark (no Spark job once they are on)."""
    uri = store.location(key_path)
    if is_local(uri):
        deletion_vectors_turned_on(local_path(uri))
    turn_on_mirror_properties(spark, store, key_path)


def _transactions(
    rows: pa.Table, keys: Sequence[str], after_lsn: bytes | None
) -> dict[tuple[Any, ...], dict[bytes, dict[str, Any]]]:
    """Per changed key, per transaction (its commit LSN) the key's last change in it (dicts of
    the stored columns), by SQL Server's order, before images and changes up to ``after_lsn``
    left out."""
    order = [rows.column(c).to_pylist() for c in CHANGE_ORDER]
    ranked = sorted(
        range(rows.num_rows), key=lambda i: tuple((c[i] is not None, c[i]) for c in order)
    )
    records = rows.to_pylist()
    last: dict[tuple[Any, ...], dict[bytes, dict[str, Any]]] = defaultdict(dict)
    for i in ranked:  # SQL Server's order: a key's last change in a transaction comes last
        record = records[i]
        lsn = bytes(record[START_LSN])
        if record[OPERATION] == BEFORE_IMAGE or (after_lsn is not None and lsn <= after_lsn):
            continue
        last[tuple(record[k] for k in keys)][lsn] = record
    return last


@dataclass
class _Version:
    """A key's version as a range leaves it: its content (a change's record; None: the held
    current version's, unchanged), start and end (LSN, commit time)."""

    content: dict[str, Any] | None
    start: tuple[bytes, Any] | None  # None: the held current version's
    end: tuple[bytes, Any] | None = None


def _versions(
    last: Mapping[tuple[Any, ...], Mapping[bytes, dict[str, Any]]],
    held: Mapping[tuple[Any, ...], dict[str, Any]],
    tracked: Sequence[str] | None,
) -> tuple[dict[tuple[Any, ...], _Version], list[_Version]]:
    """What the range does to each changed key's versions (``held``: the current versions, as
    stored): per key with a current version its new state (closed, or with ``tracked``
    columns updated in place: a transaction that changed none of them against the key's
    previous state makes no version), and the versions the range opens."""
    updated: dict[tuple[Any, ...], _Version] = {}
    opens: list[_Version] = []
    for key, per_transaction in last.items():
        current = held.get(key)
        group = _Version(None, None) if current is not None else None
        if group is not None:
            updated[key] = group
        for lsn in sorted(per_transaction):
            record = per_transaction[lsn]
            at = (lsn, record[COMMIT_TIME])
            if record[OPERATION] == DELETE:
                if group is not None:
                    group.end = at
                group = None
                continue
            if group is not None and tracked is not None:
                previous = group.content if group.content is not None else current
                assert previous is not None
                if all(previous.get(c) == record.get(c) for c in tracked):
                    group.content = record  # in place: the version it belongs to
                    continue
            if group is not None:
                group.end = at
            group = _Version(record, at)
            opens.append(group)
    return updated, opens


def _with_validity(
    version: _Version, held: dict[str, Any] | None, target: pa.Schema
) -> dict[str, Any]:
    """A version's stored row: its content (or the held version's) and its validity."""
    row = dict(held or {})
    if version.content is not None:  # a change's columns (a column its instance lacks: null)
        row.update({f.name: version.content.get(f.name) for f in target})
    start = version.start
    if start is not None:
        row[START_LSN_COLUMN], row[START_AT] = start
    row[END_LSN_COLUMN], row[END_AT] = version.end or (None, None)
    row[IS_CURRENT] = version.end is None
    return {f.name: row.get(f.name) for f in target}


def apply_changes(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    key_columns: Sequence[str],
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
    tracked: Sequence[str] | None = None,
) -> Published | None:
    """Apply ``changes`` to the keyed history (deletion vectors on) as the Spark MERGE of
    :func:`.history_store.apply_changes` would (``tracked``: its ``track_history_columns``);
    None, nothing committed, where Spark must."""
    found = deletion_vector_commits.writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    target = deletion_vector_files.arrow_schema(state.metadata["schemaString"])
    keys = [stored_name(k) for k in key_columns]
    last = _transactions(encode_rows(changes.schema, changes.read()), keys, after_lsn)
    if not last:
        return None
    order = list(last)
    wanted = pa.Table.from_pylist(
        [{**dict(zip(keys, key, strict=True)), IS_CURRENT: True} for key in order]
    )
    wanted = pa.Table.from_arrays(
        [wanted.column(k).cast(target.field(k).type) for k in keys] + [wanted.column(IS_CURRENT)],
        names=[*keys, IS_CURRENT],
    ).append_column(deletion_vector_files.MATCH, pa.array(range(len(order)), pa.int64()))
    matched = dv.matches(table, state, target, [*keys, IS_CURRENT], wanted)
    if matched is None:
        return None
    touched, before, _ = matched
    held_keys = [order[m] for m in before.column(deletion_vector_files.MATCH).to_pylist()]
    held_rows = before.drop_columns([deletion_vector_files.MATCH]).to_pylist()
    held = dict(zip(held_keys, held_rows, strict=True))
    stored_tracked = [stored_name(c) for c in tracked] if tracked else None
    updated, opens = _versions(last, held, stored_tracked)
    rewritten = [_with_validity(updated[k], held[k], target) for k in held_keys]
    closed = deletion_vector_files.conformed(
        pa.Table.from_pylist(rewritten) if rewritten else target.empty_table(), target
    )
    opened = deletion_vector_files.conformed(
        pa.Table.from_pylist([_with_validity(v, None, target) for v in opens])
        if opens
        else target.empty_table(),
        target,
    )
    written = pa.concat_tables([closed, opened])
    feed = deletion_vector_files.change_feed_rows(target, before, set(), closed, opened)
    adds, metrics = deletion_vector_files.file_actions(table, touched, written, feed)
    metrics.update(
        history_multiset.commit_metrics(
            len(order) + opened.num_rows, closed.num_rows, opened.num_rows
        )
    )
    parameters = deletion_vector_commits.keyed_parameters(keys)
    return deletion_vector_commits.commit_actions(
        table, uri, state, parameters, adds, metrics, properties
    )
