"""Typed records of what the stores hold about a table, the value types ``spark/`` and ``dagster/``
pass each other instead of property dicts: a mirror's position, a change-log range partition's
properties (with its coverage), a gap.

Each record is immutable and knows nothing of how it is stored: the module that stores it has
the functions that turn it into its stored form and back (a mirror commit's ``userMetadata``:
:func:`cdc_assets.spark.mirror_store.position_of` and
:func:`~cdc_assets.spark.mirror_store.position_properties`; a change-log partition's properties
row: :mod:`cdc_assets.spark.change_log_properties`), so tables written before read as they always
did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .lsn import Lsn, LsnRange


@dataclass(frozen=True, slots=True)
class MirrorPosition:
    """Where a mirror is: the LSN it reached, the snapshot it was built from, its rows.

    ``lsn`` is the mirror's position: the LSN its last commit recorded (``commit_lsn``), or later
    when quiet ranges (ranges without a change for the table) moved it on after that commit
    without a commit of their own. None for a mirror whose commit recorded no LSN.
    """

    lsn: Lsn | None
    snapshot_version: str | None  # the write id of the snapshot partition the mirror is built from
    rows: int | None  # the mirror's rows at ``commit_lsn`` (None: not known)
    commit_lsn: Lsn | None = None  # the LSN the mirror's last commit recorded
    commit_time: str | None = None  # the source's commit time of the last change applied (ISO)
    columns: tuple[str, ...] | None = None  # the mirror's columns, as its last commit recorded

    def built_from(self, snapshot_version: str) -> bool:
        """The mirror is at an LSN and built from the snapshot ``snapshot_version``."""
        return self.lsn is not None and self.snapshot_version == snapshot_version


@dataclass(frozen=True, slots=True)
class Coverage:
    """Whether a range was read inside its capture instance's validity interval: the interval
    as it was after the read, and why the range is not covered when it is not."""

    ok: bool
    min_lsn: Lsn | None = None  # the capture instance's min LSN after the read
    max_lsn: Lsn | None = None  # the database's max LSN after the read
    reason: str = ""  # empty when ``ok``


@dataclass(frozen=True, slots=True)
class RangeProperties:
    """What a change log's range partition ``(lo, hi]`` was published with: how it was read,
    its rows per operation, the commit times and lag of its transactions, its coverage."""

    lsn_range: LsnRange
    capture_instance: str | None = None
    read_from: Lsn | None = None  # rows above it were read (the table's snapshot holds the rest)
    rows: int | None = None  # change rows (None: not known)
    operations: Mapping[str, int] = field(default_factory=dict)  # rows per operation name
    transactions: int | None = None  # the range's transactions (of any table)
    first_commit: str | None = None  # commit time of the first and the last of them (ISO)
    last_commit: str | None = None
    lag_seconds: float | None = None  # from the last commit to the read, by the server's clock
    read_at: str | None = None  # when the range was read (ISO, UTC)
    columns_not_captured: tuple[str, ...] = ()  # columns of the table its capture instance lacks
    coverage: Coverage | None = None  # None: no coverage recorded


@dataclass(frozen=True, slots=True)
class Gap:
    """A change-log partition that could not be written because the changes it needs are gone
    (cleanup) or its capture instance changed: the sync sensor re-snapshots the table."""

    reason: str | None
    snapshot_version: str | None  # the table's snapshot when the gap was found (None: none)
    run_id: str | None  # the run that found it
    # a re-snapshot resolves it as a matter of course and the sensor starts one (a new capture
    # instance, changed column rules; sync.on_gap = resnapshot): the mirror and history wait
    # for it without failing the run
    awaits_resnapshot: bool = False
