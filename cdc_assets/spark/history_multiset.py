"""The history of a keyless table: one version per occurrence of a row.

A keyless table is a multiset; a row's identity is its whole content, and two equal rows are
two occurrences. Per distinct row and transaction the changes' net count says how many
occurrences the transaction added (inserts and after images) or removed (deletes and before
images): each added one opens a version at the transaction, each removed one closes one of the
row's current versions, the oldest first (equal rows cannot be told apart otherwise; which one
closes changes no "as of" reading, only which interval a version shows) (:func:`row_versions`).

A small range is applied in the driver (:func:`apply_changes_in_driver`), with deletion vectors
as :mod:`.history_driver` applies a keyed one: the current versions of the rows the range
touches are found in the files whose statistics may hold them, those it closes are deleted by
vectors and written again closed, with the versions it opens, in one Parquet file and one
commit; no Spark job. Otherwise one Spark MERGE (:func:`.history_store.merge`) deletes every
current version of each row the range touched and inserts its versions again, closed or current,
with those the range opened (:func:`apply_changes`).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap64
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from cdc_assets.lsn import CHANGE_ORDER, OPERATION, START_LSN

from . import deletion_vectors
from .asset_store import AssetStore
from .commit_metadata import Published
from .deletion_vector_commits import commit_actions, multiset_parameters, writable_log
from .deletion_vector_files import (
    MATCH,
    Touched,
    arrow_schema,
    change_feed_rows,
    conformed,
    file_actions,
    held_positions,
    record_count,
)
from .driver_writes import RowsInDriver
from .history_store import (
    COMMIT_TIME,
    END_AT,
    END_LSN_COLUMN,
    HAS_CONTENT,
    IS_CURRENT,
    START_AT,
    START_LSN_COLUMN,
    VALIDITY_COLUMNS,
    current_versions,
    merge,
    with_history_columns,
)
from .merge_with_deletion_vectors import MULTISET_SCAN_ROWS, multiset_candidates, value_codes
from .mirror_merge import BEFORE_IMAGE, DELETE, after
from .spark_sql_names import sql_name
from .stored_columns import decode_from_delta, encode_rows

MISSING_VERSION = "keyless history: the changes remove a row the history has no current version of"

Identity = tuple[Any, ...]
Held = tuple[bytes, Any, Any]  # a current version: its start LSN, start time, and a handle
Net = dict[Identity, dict[bytes, list[Any]]]  # per row, per transaction: [net count, commit time]


def _identity(row: Sequence[Any]) -> Identity:
    """A row's content as a dict key (binary values as bytes)."""
    return tuple(bytes(v) if isinstance(v, bytearray | memoryview) else v for v in row)


def add_change(net: Net, identity: Identity, lsn: bytes, operation: int, at: Any) -> None:
    """One change row counted into ``net``: +1 for an insert or after image, -1 otherwise."""
    sign = -1 if operation in (DELETE, BEFORE_IMAGE) else 1
    entry = net[identity].setdefault(lsn, [0, at])
    entry[0] += sign


def row_versions(
    net: Net, held: Mapping[Identity, Sequence[Held]]
) -> tuple[list[tuple[Any, bytes, Any]], list[tuple[Identity, bytes, Any, bytes | None, Any]]]:
    """What a range does to the versions of the rows it touches (``net``; ``held``: each row's
    current versions, oldest first): the current versions it closes, as ``(handle, end LSN,
    end time)``, and the versions it opens, as ``(row, start LSN, start time, end LSN or None,
    end time)`` (one opened and closed again inside the range has an end). :class:`ValueError`
    where a row loses more occurrences than it has."""
    closes: list[tuple[Any, bytes, Any]] = []
    opens: list[tuple[Identity, bytes, Any, bytes | None, Any]] = []
    for identity, transactions in net.items():
        queue: deque[tuple[bytes, Any, Any]] = deque(held.get(identity, ()))
        for lsn in sorted(transactions):
            count, at = transactions[lsn]
            for _ in range(count):
                queue.append((lsn, at, None))  # handle None: opened by this range
            for _ in range(-count):
                if not queue:
                    raise ValueError(f"{MISSING_VERSION} (at {lsn.hex()})")
                start, start_at, handle = queue.popleft()
                if handle is None:
                    opens.append((identity, start, start_at, lsn, at))
                else:
                    closes.append((handle, lsn, at))
        opens.extend((identity, s, a, None, None) for s, a, h in queue if h is None)
    return closes, opens


def apply_changes(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    changes: DataFrame,
    *,
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published:
    """Apply the change rows ``changes`` (after ``after_lsn``) to the keyless history at
    ``key_path`` in one Spark MERGE committed with ``properties``."""
    uri = store.location(key_path)
    history = decode_from_delta(spark.read.format("delta").load(uri))
    fields = [f for f in history.schema.fields if f.name not in VALIDITY_COLUMNS]
    columns = [f.name for f in fields]
    cols = [F.col(sql_name(c)) for c in columns]
    changes = with_history_columns(spark, uri, changes)
    relevant = after(changes, after_lsn).select(
        *cols,
        *[F.col(sql_name(c)) for c in CHANGE_ORDER if c not in columns],
        F.col(sql_name(COMMIT_TIME)),
    )
    net: Net = defaultdict(dict)
    content: dict[Identity, tuple[Any, ...]] = {}
    for row in relevant.collect():
        values = tuple(row[c] for c in columns)
        identity = _identity(values)
        content.setdefault(identity, values)
        add_change(net, identity, bytes(row[START_LSN]), row[OPERATION], row[COMMIT_TIME])
    touched = spark.createDataFrame(list(content.values()), T.StructType(fields))
    current = current_versions(spark, uri)
    found = current.join(touched, on=_null_safe(current, touched, columns), how="left_semi")
    held: dict[Identity, list[Held]] = defaultdict(list)
    versions_held = sorted(found.collect(), key=lambda r: bytes(r[START_LSN_COLUMN]))
    for n, row in enumerate(versions_held):  # handle: its place in this list
        start = bytes(row[START_LSN_COLUMN])
        held[_identity(tuple(row[c] for c in columns))].append((start, row[START_AT], n))
    closes, opens = row_versions(net, held)
    ends = {handle: (end, at) for handle, end, at in closes}
    # every current version of a touched row is deleted and inserted again, closed or not
    versions: list[tuple[Any, ...]] = []
    for identity, kept in held.items():
        for start, start_at, handle in kept:
            end, end_at = ends.get(handle, (None, None))
            versions.append((*content[identity], start, end, start_at, end_at, end is None))
    versions.extend(
        (*content[i], start, end, start_at, end_at, end is None)
        for i, start, start_at, end, end_at in opens
    )
    schema = T.StructType(
        [
            *fields,
            T.StructField(START_LSN_COLUMN, T.BinaryType()),
            T.StructField(END_LSN_COLUMN, T.BinaryType()),
            T.StructField(START_AT, T.TimestampNTZType()),
            T.StructField(END_AT, T.TimestampNTZType()),
            T.StructField(IS_CURRENT, T.BooleanType()),
        ]
    )
    opened = spark.createDataFrame(versions, schema)
    closes_frame = spark.createDataFrame([], T.StructType(fields)).select(
        *cols,
        F.lit(None).cast("binary").alias(END_LSN_COLUMN),
        F.lit(None).cast(T.TimestampNTZType()).alias(END_AT),
        F.lit(False).alias(HAS_CONTENT),
    )
    return merge(
        spark, store, key_path, closes_frame, opened, columns, properties, None, drops=touched
    )


def _null_safe(a: DataFrame, b: DataFrame, columns: Sequence[str]) -> list[Any]:
    return [a[sql_name(c)].eqNullSafe(b[sql_name(c)]) for c in columns]


def commit_metrics(source_rows: int, rewritten: int, opened: int) -> dict[str, int]:
    """The MERGE metrics of a history commit made in the driver (keyed or keyless): the versions
    it wrote again (closed, or updated in place) and those it opened, as Spark's MERGE counts
    them."""
    return {
        "numSourceRows": source_rows,
        "numTargetRowsInserted": opened,
        "numTargetRowsUpdated": rewritten,
        "numTargetRowsMatchedUpdated": rewritten,
        "numTargetRowsDeleted": 0,
        "numTargetRowsMatchedDeleted": 0,
        "numTargetRowsCopied": 0,
        "numOutputRows": rewritten + opened,
        "numTargetRowsNotMatchedBySourceUpdated": 0,
        "numTargetRowsNotMatchedBySourceDeleted": 0,
    }


def apply_changes_in_driver(
    store: AssetStore,
    key_path: Sequence[str],
    changes: RowsInDriver,
    *,
    after_lsn: bytes | None,
    properties: Mapping[str, Any],
) -> Published | None:
    """:func:`apply_changes` made in the driver, with deletion vectors (module doc): only the
    current versions the range closes are deleted and written again, closed. None, nothing
    committed, where Spark must apply it: the table is not one this writes
    (:func:`.deletion_vector_commits.writable_log`), the files that may hold the touched rows
    have more than :data:`.merge_with_deletion_vectors.MULTISET_SCAN_ROWS` rows, or a row
    would lose an occurrence it does not have (Spark's path then says so)."""
    found = writable_log(store, key_path)
    if found is None:
        return None
    table, uri, state = found
    target = arrow_schema(state.metadata["schemaString"])
    data = pa.schema([f for f in target if f.name not in VALIDITY_COLUMNS])
    stored = encode_rows(changes.schema, changes.read())
    if after_lsn is not None:
        starts = stored.column(START_LSN).to_pylist()
        stored = stored.filter(pa.array([bytes(s) > after_lsn for s in starts], pa.bool_()))
    if stored.num_rows == 0:
        return None
    contents = conformed(stored, data)  # the change rows' values as the history holds them
    net: Net = defaultdict(dict)
    order: dict[Identity, int] = {}  # each touched row: its index in ``rows``
    first: list[int] = []  # ... and a change row holding it
    for n, (record, row) in enumerate(zip(stored.to_pylist(), contents.to_pylist(), strict=True)):
        identity = _identity(tuple(row.values()))
        if identity not in order:
            order[identity] = len(order)
            first.append(n)
        add_change(net, identity, bytes(record[START_LSN]), record[OPERATION], record[COMMIT_TIME])
    rows = contents.take(pa.array(first, pa.int64()))
    files, held = _current_versions(table, state, target, rows)
    if files is None:
        return None
    try:
        closes, opens = row_versions(net, held)
    except ValueError:
        return None  # Spark's path fails saying so
    return _commit(table, uri, state, target, rows, order, files, closes, opens, properties)


def _current_versions(
    table: Path, state: Any, target: pa.Schema, rows: pa.Table
) -> tuple[list[tuple[dict[str, Any], BitMap64, pa.Table]] | None, dict[Identity, list[Held]]]:
    """The current versions of ``rows`` (distinct, the history's data columns): each row's,
    oldest first, handled by (file, position), and the files holding them (their add action,
    deletion vector and rows); None for the files when they are more than the driver reads."""
    uniques = [pc.unique(rows.column(i).combine_chunks()) for i in range(rows.num_columns)]
    codes = value_codes(rows, uniques).append_column(MATCH, pa.array(range(len(rows)), pa.int64()))
    candidates = multiset_candidates(state, rows)
    held: dict[Identity, list[Held]] = defaultdict(list)
    if sum(record_count(add) for add in candidates) > MULTISET_SCAN_ROWS:
        return None, held
    identities = [_identity(tuple(r.values())) for r in rows.to_pylist()]
    files: list[tuple[dict[str, Any], BitMap64, pa.Table]] = []
    for add in candidates:
        old = deletion_vectors.read(table, add.get("deletionVector"))
        found = conformed(pq.read_table(table / unquote(add["path"])), target)
        closed = pc.indices_nonzero(pc.invert(found.column(IS_CURRENT).fill_null(False)))
        skip = old | BitMap64(closed.to_pylist())
        matched = held_positions(value_codes(found.select(rows.column_names), uniques), codes, skip)
        if matched is None:
            continue
        positions, sources = matched
        taken = pa.array(positions, pa.int64())
        starts = found.column(START_LSN_COLUMN).take(taken).to_pylist()
        times = found.column(START_AT).take(taken).to_pylist()
        for position, source, start, at in zip(positions, sources, starts, times, strict=True):
            held[identities[source]].append((bytes(start), at, (len(files), position)))
        files.append((add, old, found))
    for versions in held.values():
        versions.sort(key=lambda v: v[0])
    return files, held


def _commit(
    table: Path,
    uri: str,
    state: Any,
    target: pa.Schema,
    rows: pa.Table,
    order: Mapping[Identity, int],
    files: list[tuple[dict[str, Any], BitMap64, pa.Table]],
    closes: list[tuple[Any, bytes, Any]],
    opens: list[tuple[Identity, bytes, Any, bytes | None, Any]],
    properties: Mapping[str, Any],
) -> Published | None:
    """The commit of :func:`apply_changes_in_driver`: the closed versions deleted by vectors and
    written again with their end, the opened ones added."""
    by_file: dict[int, list[tuple[int, bytes, Any]]] = defaultdict(list)
    for (index, position), end, at in closes:
        by_file[index].append((position, end, at))
    touched: list[Touched] = []
    before = [target.empty_table()]
    ended: list[tuple[bytes, Any]] = []
    for index, closing in sorted(by_file.items()):
        add, old, rows_of_file = files[index]
        closing.sort()
        positions = [p for p, _, _ in closing]
        touched.append((add, old, BitMap64(positions)))
        before.append(rows_of_file.take(pa.array(positions, pa.int64())))
        ended.extend((end, at) for _, end, at in closing)
    if not touched and not opens:
        return None
    previous = pa.concat_tables(before)
    closed = previous
    for name, values in (
        (END_LSN_COLUMN, [e for e, _ in ended]),
        (END_AT, [a for _, a in ended]),
        (IS_CURRENT, [False] * len(ended)),
    ):
        field = target.field(name)
        closed = closed.set_column(
            closed.schema.get_field_index(name), field, pa.array(values, field.type)
        )
    opened = rows.take(pa.array([order[i] for i, *_ in opens], pa.int64()))
    for name, values in (
        (START_LSN_COLUMN, [s for _, s, _, _, _ in opens]),
        (END_LSN_COLUMN, [e for *_, e, _ in opens]),
        (START_AT, [a for _, _, a, _, _ in opens]),
        (END_AT, [a for *_, a in opens]),
        (IS_CURRENT, [e is None for *_, e, _ in opens]),
    ):
        field = target.field(name)
        opened = opened.append_column(field, pa.array(values, field.type))
    opened = conformed(opened, target)
    written = pa.concat_tables([closed, opened])
    matched = previous.append_column(MATCH, pa.array(range(previous.num_rows), pa.int64()))
    feed = change_feed_rows(target, matched, set(), closed, opened)
    adds, metrics = file_actions(table, touched, written, feed)
    metrics.update(commit_metrics(rows.num_rows, closed.num_rows, opened.num_rows))
    parameters = multiset_parameters(rows.column_names)
    return commit_actions(table, uri, state, parameters, adds, metrics, properties)
