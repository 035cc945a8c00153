"""Typed records of what the stores hold about a table, the value types ``spark/`` and ``dagster/``
pass each other instead of property dicts.

Each record is immutable and knows nothing of how it is stored: the module that stores it has
the functions that turn it into its stored form and back (a mirror commit's ``userMetadata``:
:func:`cdc_assets.spark.mirror_store.position_of` and
:func:`~cdc_assets.spark.mirror_store.position_properties`), so tables written before read as they
always did.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lsn import Lsn


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
