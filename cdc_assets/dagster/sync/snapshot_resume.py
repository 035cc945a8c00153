"""When a snapshot run continues an unfinished snapshot, and what a person reads while it runs.

A big table's snapshot is committed a batch of chunks at a time
(:mod:`cdc_assets.spark.snapshot_chunks`); a run killed half way leaves its partition *in
progress*, which every reader takes for no snapshot at all (the sensor, the sync state, the
mirror). The next snapshot run of the table resumes it after its last key done — unless the
unfinished snapshot is stale for the new request (:func:`resume_decision`):

- the table now has another capture instance (a schema change, CDC disabled and enabled again):
  the unfinished chunks have other columns, or were read for an instance whose changes can no
  longer be replayed over them;
- cleanup moved the capture instance's min LSN past the unfinished snapshot's lowest low
  watermark: the changes its first chunks need replayed are gone;
- the table has no key (its snapshot is one chunk: nothing to resume);
- the run asks for a snapshot of its own: it carries a re-snapshot reason (tag
  ``cdc_assets/resnapshot_reason``, set by the sensor after a gap, or by a person who wants the
  table read again from its first key) other than the one the unfinished snapshot was taken for.

A run without such a reason (the sensor finding a table without a finished snapshot, a person's
plain materialization of ``snapshot``, a re-execution of the killed run) resumes. Whatever was
decided is said in the run's log, with the reason when the snapshot starts over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdc_assets.lsn import Lsn
from cdc_assets.spark.snapshot_chunks import BatchCommitted, SnapshotProgress
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.column_masks import rules_fingerprint

INITIAL_REASON = "initial snapshot"


def capture_instance_start(instance: CaptureInstance) -> str | None:
    """What tells this capture instance from an earlier one of the same name."""
    return instance.start_lsn.hex if instance.start_lsn is not None else None


def resume_decision(
    unfinished: SnapshotProgress | None,
    instance: CaptureInstance,
    min_lsn: Lsn,
    reason: str | None,
) -> tuple[SnapshotProgress | None, str | None]:
    """The unfinished snapshot to resume (None: start a new one) and a line for the run's log
    (None when there was nothing to decide). ``min_lsn``: the capture instance's min LSN now;
    ``reason``: the run's re-snapshot reason, if it has one (module doc)."""
    if unfinished is None:
        return None, None
    p = unfinished.properties
    table = f"[{instance.source_schema}].[{instance.source_table}]"
    was = (
        f"the unfinished snapshot of {table} ({unfinished.chunks_done} chunks, "
        f"{unfinished.rows:,} rows, started {unfinished.started_at})"
    )
    why = None
    if not instance.key_columns:
        why = "the table has no key, so its snapshot is read whole in one chunk"
    elif p.get("capture_instance") != instance.name or p.get(
        "capture_instance_start"
    ) != capture_instance_start(instance):
        why = (
            f"it was read for capture instance {p.get('capture_instance')} (start "
            f"{p.get('capture_instance_start')}), the table is now captured by {instance.name} "
            f"(start {capture_instance_start(instance)})"
        )
    elif (p.get("column_rules") or "") != rules_fingerprint(instance):
        why = "the table's column rules changed since (columns: in the configuration)"
    elif min_lsn > unfinished.replay_from.increment():
        why = (
            f"cleanup moved the min LSN of {instance.name} to {min_lsn.hex}, past its replay LSN "
            f"{unfinished.replay_from.hex}: changes its chunks need were removed"
        )
    elif reason is not None and reason != p.get("reason"):
        why = f"this run asks for a new snapshot ({reason}), it was for: {p.get('reason')}"
    if why is not None:
        return None, f"{was} starts over from the first key: {why}."
    return unfinished, (
        f"{was} resumes after chunk {unfinished.chunks_done} (commit {unfinished.commit_seq}); "
        "the chunks read from now on carry their own watermarks."
    )


@dataclass(frozen=True)
class Progress:
    """How far a running snapshot is, as a person reads it (log line, metadata)."""

    table: str
    chunks_done: int
    chunks_total: int
    rows_done: int
    rows_read: int  # by this run
    rows_expected: int | None
    rows_per_second: float | None
    eta_seconds: float | None
    complete: bool

    @classmethod
    def of(cls, table: str, batch: BatchCommitted, rows_expected: int | None) -> Progress:
        rate = batch.rows_read / batch.seconds if batch.seconds > 0 and batch.rows_read else None
        eta = None
        if batch.complete:
            eta = 0.0
        elif rate and rows_expected is not None:
            eta = max(0, rows_expected - batch.rows_done) / rate
        return cls(
            table,
            batch.chunks_done,
            batch.chunks_total,
            batch.rows_done,
            batch.rows_read,
            rows_expected,
            rate,
            eta,
            batch.complete,
        )

    def line(self) -> str:
        """``[dbo].[orders] snapshot: 2,500,000 of ~10,000,000 rows (25 %), 10 of 40 chunks,
        31,200 rows/s, about 4 min left``."""
        of = ""
        if self.rows_expected:
            share = min(100, round(100 * self.rows_done / self.rows_expected))
            of = f" of ~{self.rows_expected:,} rows ({share} %)"
        else:
            of = " rows"
        rate = f", {self.rows_per_second:,.0f} rows/s" if self.rows_per_second else ""
        left = ""
        if self.complete:
            left = ", complete"
        elif self.eta_seconds is not None:
            left = f", about {_duration(self.eta_seconds)} left"
        return (
            f"{self.table} snapshot: {self.rows_done:,}{of}, {self.chunks_done} of "
            f"{self.chunks_total} chunks{rate}{left}"
        )

    def metadata(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "snapshot_rows_done": self.rows_done,
            "snapshot_rows_read": self.rows_read,  # by this run: a resumed one reads the rest
            "snapshot_chunks_done": self.chunks_done,
            "snapshot_chunks": self.chunks_total,
            "snapshot_complete": self.complete,
        }
        if self.rows_expected is not None:
            found["snapshot_rows_expected"] = self.rows_expected
        if self.rows_per_second is not None:
            found["snapshot_rows_per_second"] = round(self.rows_per_second, 1)
        if self.eta_seconds is not None:
            found["snapshot_eta_seconds"] = round(self.eta_seconds, 1)
        return found


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
