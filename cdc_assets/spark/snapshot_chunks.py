"""A big table's snapshot, read and committed a batch of chunks at a time: resumable.

The table's key ranges (:func:`~cdc_assets.sqlserver.chunks.plan_key_ranges`, in key order) are
read ``chunks_per_commit`` at a time, one Spark task each, and every batch is one Delta commit of
the ``snapshot`` partition (:func:`.chunk_commits.append_chunks`). Each commit's properties say
where the snapshot stands (:class:`SnapshotProgress`): its identity (``write_id``, the same in
every commit), the chunks done and the last key done, the lowest low watermark and the highest
high watermark of the chunks so far (``replay_from``, ``snapshot_lsn``: each chunk's marker row
holds its own) and the rows so far, with ``in_progress`` set. The last batch's commit drops
``in_progress`` and the last key: it publishes the snapshot with the properties a snapshot
committed at once has (``replay_from``, ``snapshot_lsn``, ``rows``, ``mode`` ...).

Killed at any point — the process, an executor, the source connection — the partition holds the
batches committed before; a new run resumes after the last key done
(:func:`write_in_chunks` with ``resume``), so it reads again at most the batch that was in
flight. The chunks read after a resume are new chunks with their own watermarks: the snapshot
stays consistent from its highest high watermark on, replaying changes from its lowest low one.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver.key_values import decode_key, encode_key
from cdc_assets.sqlserver.snapshot import KeyRange

from . import sqlserver_source
from .asset_store import AssetStore
from .chunk_commits import append_chunks
from .commit_metadata import Published
from .partition_rows import COMMIT_SEQ, IN_PROGRESS, WRITE_ID

__all__ = [
    "BatchCommitted",
    "SnapshotProgress",
    "SnapshotReplaced",
    "write_in_chunks",
]

CHUNKS_DONE = "chunks_done"
LAST_KEY = "last_key"
ROWS = "rows"
REPLAY_FROM = "replay_from"
SNAPSHOT_LSN = "snapshot_lsn"
STARTED_AT = "started_at"
RESUMES = "resumes"
TAKEN_AT = "taken_at"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class SnapshotProgress:
    """An unfinished snapshot as its newest commit recorded it (``properties``: that commit's
    properties as written; identity keys such as ``capture_instance`` are among them)."""

    write_id: str
    commit_seq: int
    chunks_done: int
    last_key: tuple[Any, ...]
    replay_from: Lsn
    snapshot_lsn: Lsn
    rows: int
    started_at: str
    resumes: int
    properties: Mapping[str, Any]

    @classmethod
    def from_properties(cls, p: Mapping[str, Any] | None) -> SnapshotProgress | None:
        """The progress a partition's newest properties row records; None when it records no
        unfinished snapshot (a published partition, a gap, nothing)."""
        if not p or not p.get(IN_PROGRESS) or p.get(LAST_KEY) is None:
            return None
        return cls(
            write_id=str(p[WRITE_ID]),
            commit_seq=int(p[COMMIT_SEQ]),
            chunks_done=int(p[CHUNKS_DONE]),
            last_key=decode_key(p[LAST_KEY]),
            replay_from=Lsn.parse(p[REPLAY_FROM]),
            snapshot_lsn=Lsn.parse(p[SNAPSHOT_LSN]),
            rows=int(p[ROWS]),
            started_at=str(p.get(STARTED_AT) or ""),
            resumes=int(p.get(RESUMES) or 0),
            properties=dict(p),
        )


@dataclass(frozen=True)
class BatchCommitted:
    """What one commit of :func:`write_in_chunks` did, for progress reports."""

    chunks_done: int  # of the whole snapshot, this commit's included
    chunks_total: int  # chunks done before this run plus the chunks this run planned
    rows_done: int  # of the whole snapshot
    rows_read: int  # by this run (committed batches)
    seconds: float  # since this run started reading
    complete: bool
    published: Published


@dataclass
class _Tally:
    """Where the snapshot stands after the commits so far (this run's and those it resumes)."""

    identity: Mapping[str, Any]
    started_at: str
    resumes: int
    done: int = 0
    rows: int = 0
    read: int = 0  # by this run
    bounds: tuple[Lsn, Lsn] | None = None

    def properties(self, held: DataFrame, batch: Sequence[KeyRange], last: bool) -> dict:
        """The properties of the commit of ``batch`` (``held``: its rows, read), and the tally
        moved on by it (the commit that follows is the one they go into)."""
        replay_from, snapshot_lsn, batch_rows = sqlserver_source.snapshot_summary(held)
        if self.bounds is not None:
            replay_from = min(replay_from, self.bounds[0])
            snapshot_lsn = max(snapshot_lsn, self.bounds[1])
        self.bounds = (replay_from, snapshot_lsn)
        self.done += len(batch)
        self.rows += batch_rows
        self.read += batch_rows
        properties: dict[str, Any] = {
            **self.identity,
            REPLAY_FROM: replay_from.hex,
            SNAPSHOT_LSN: snapshot_lsn.hex,
            ROWS: self.rows,
            CHUNKS_DONE: self.done,
            STARTED_AT: self.started_at,
            RESUMES: self.resumes,
            TAKEN_AT: _now(),
        }
        if not last:
            upto = batch[-1].upto
            assert upto is not None  # only the last chunk is open-ended
            properties[IN_PROGRESS] = True
            properties[LAST_KEY] = encode_key(upto)
        return properties


class SnapshotReplaced(RuntimeError):
    """Another snapshot of the table took over its partition while this one was written."""


def _fence(
    store: AssetStore, key_path: Sequence[str], partition: str, write_id: str, seq: int
) -> None:
    """Before commit ``seq`` of ``write_id``: the partition's newest commit must be this
    snapshot's ``seq - 1``. Another snapshot of the same table started meanwhile (a second run)
    replaced the partition; appending to it would mix the two, so this one stops."""
    newest = store.written_properties(key_path, partition) or {}
    if newest.get(WRITE_ID) != write_id or newest.get(COMMIT_SEQ) != seq - 1:
        raise SnapshotReplaced(
            f"{'/'.join(key_path)}: another snapshot of this table (write {newest.get(WRITE_ID)},"
            f" commit {newest.get(COMMIT_SEQ)}) replaced this one (write {write_id}) while it "
            "ran; this run stops, the other goes on. Run one snapshot of a table at a time."
        )


def write_in_chunks(
    spark: SparkSession,
    store: AssetStore,
    key_path: Sequence[str],
    partition: str,
    plan: sqlserver_source.ReadPlan,
    *,
    identity: Mapping[str, Any],
    write_id: str,
    resume: SnapshotProgress | None = None,
    chunks_per_commit: int = 2,
    later_columns: DataFrame | None = None,
    on_commit: Callable[[BatchCommitted], None] | None = None,
) -> Published:
    """Read ``plan``'s key ranges ``chunks_per_commit`` at a time and commit each batch to
    ``partition`` (module doc); the last commit publishes the snapshot. ``identity``: the
    properties every commit carries (kind, capture instance, mode, reason, rows expected ...);
    ``resume``: the unfinished snapshot ``plan`` continues (its key ranges start after
    ``resume.last_key``; ``write_id`` is then ``resume.write_id``); ``on_commit``: the progress
    after each commit."""
    if chunks_per_commit < 1:
        raise ValueError(f"chunks_per_commit must be at least 1; got {chunks_per_commit}")
    chunks = list(plan.key_ranges)
    if not chunks:
        raise ValueError("a snapshot plan without key ranges")
    if resume is not None and resume.write_id != write_id:
        raise ValueError("a resumed snapshot keeps its write id")
    if resume is None:
        tally = _Tally(identity, _now(), 0)
        seq = 0
    else:
        tally = _Tally(
            identity,
            resume.started_at,
            resume.resumes + 1,
            done=resume.chunks_done,
            rows=resume.rows,
            bounds=(resume.replay_from, resume.snapshot_lsn),
        )
        seq = resume.commit_seq + 1
    total = tally.done + len(chunks)
    clock = time.monotonic()
    published: Published | None = None
    for first in range(0, len(chunks), chunks_per_commit):
        batch = chunks[first : first + chunks_per_commit]
        complete = first + len(batch) == len(chunks)
        if seq > 0:
            _fence(store, key_path, partition, write_id, seq)
        published = append_chunks(
            spark,
            store,
            key_path,
            partition,
            sqlserver_source.load_snapshot_chunks(spark, plan, batch),
            functools.partial(tally.properties, batch=batch, last=complete),
            write_id=write_id,
            commit_seq=seq,
            later_columns=later_columns,
        )
        seq += 1
        if on_commit is not None:
            on_commit(
                BatchCommitted(
                    chunks_done=tally.done,
                    chunks_total=total,
                    rows_done=tally.rows,
                    rows_read=tally.read,
                    seconds=time.monotonic() - clock,
                    complete=complete,
                    published=published,
                )
            )
    assert published is not None
    return published
