"""Which small files of a Delta table to merge, and when: a tiered policy that keeps a table's
number of files logarithmic in its size, however many commits add a file each.

Every range adds a file to each table it touches (a change log's partition, a mirror's or a
history's merge): a range every few seconds is hundreds of files an hour per table, and every
read opens them all. Merging all small files whenever there are too many rewrites the same rows
again and again; merging only files of about the same size rewrites a row about once per
*level* (Lucene's ``LogMergePolicy``, Cassandra's size-tiered compaction):

- a file's level is ``log_FANOUT`` of its live bytes (its bytes less the share of rows its
  deletion vector removed); files below a floor (:func:`floor_bytes`, two levels below the
  large files) are all one level;
- files of at least a quarter of the table's target file size (:func:`target_bytes`: about
  :data:`.key_clustering.ROWS_PER_FILE` rows' worth of bytes, as a large mirror's key-range files
  are) are *large*: never merged, so a large mirror's clustered files keep their key ranges;
- the small files, in order, are cut into *bands* of similar level (the highest level among the
  files left, down to 0.75 below it, takes every file up to the last one in that band); each
  band is merged in groups of :data:`FANOUT` consecutive files, what is left of a band (fewer
  than ``FANOUT`` files) stays.

So a table holds at most about ``FANOUT - 1`` small files per level (three or four levels from
the floor to the large files) plus its large files, and a row is rewritten about once per level
it climbs. The order is a change log's partition order (consecutive ranges end up in one file,
so a range's rows stay in one or two files and file statistics prune reads by the partition),
or size (largest first) where files have no order (mirrors, histories). A file whose rows are
all deleted is dropped whatever its size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .key_clustering import ROWS_PER_FILE

FANOUT = 8  # files of one level merged into one
LEVEL_SPAN = 0.75  # a band: the highest level left, down to this much below it
MIN_TARGET_BYTES = 1 << 20  # a table's target file size is at least this
# the floor level: files smaller than target / 4 / FANOUT**2 are all one level
FLOOR_LEVELS_BELOW_LARGE = 2


@dataclass(frozen=True)
class DataFile:
    """A live data file as the policy sees it: ``key`` names it (path and deletion vector),
    ``order`` places it among the table's files (see the module doc)."""

    key: Any
    size: int  # bytes of the file
    rows: int  # rows in the file (its statistics' numRecords)
    deleted: int = 0  # rows its deletion vector removes
    order: tuple[Any, ...] = ()
    sequence: Any = None  # files of different sequences are never merged together

    @property
    def live_bytes(self) -> float:
        """The bytes of its rows that are still live (all of them without a deletion vector)."""
        if not self.rows:
            return float(self.size)
        return self.size * (self.rows - self.deleted) / self.rows

    @property
    def empty(self) -> bool:
        """Every row of it is deleted: the file can go without a rewrite."""
        return self.rows > 0 and self.deleted >= self.rows


def target_bytes(files: Sequence[DataFile]) -> int:
    """The table's target file size: about :data:`.key_clustering.ROWS_PER_FILE` live rows'
    worth of its bytes, at least :data:`MIN_TARGET_BYTES`."""
    size = sum(f.live_bytes for f in files)
    rows = sum(f.rows - f.deleted for f in files)
    return max(int(size / max(rows, 1) * ROWS_PER_FILE), MIN_TARGET_BYTES)


def large_bytes(target: int) -> int:
    """Files of at least this many live bytes are never merged."""
    return target // 4


def floor_bytes(target: int) -> float:
    """Files below this many live bytes are all one level."""
    return large_bytes(target) / FANOUT**FLOOR_LEVELS_BELOW_LARGE


def level(file: DataFile, floor: float) -> float:
    return math.log(max(file.live_bytes, floor), FANOUT)


def plan(files: Sequence[DataFile], *, ordered: bool) -> list[list[DataFile]]:
    """The groups of files to merge, each into one file (a file whose rows are all deleted
    is a group of its own: it is dropped). ``ordered``: files are taken in their ``order`` (a
    change log's partitions) and groups are consecutive in it; otherwise largest first. Files
    of different ``sequence`` are never in one group. Nothing when the table is within the
    policy's bounds."""
    groups: list[list[DataFile]] = [[f] for f in files if f.empty]
    live = [f for f in files if not f.empty]
    target = target_bytes(live)
    small = [f for f in live if f.live_bytes < large_bytes(target)]
    floor = floor_bytes(target)
    sequences: dict[Any, list[DataFile]] = {}
    for f in small:
        sequences.setdefault(f.sequence, []).append(f)
    for sequence in sequences.values():
        if ordered:
            sequence.sort(key=lambda f: f.order)
        else:
            sequence.sort(key=lambda f: -f.live_bytes)
        groups += _bands(sequence, floor)
    return groups


def _bands(small: list[DataFile], floor: float) -> list[list[DataFile]]:
    """:func:`plan` of one sequence of small files, in order (the module doc's bands)."""
    groups: list[list[DataFile]] = []
    levels = [level(f, floor) for f in small]
    start = 0
    while start < len(small):
        top = max(levels[start:])
        bottom = top - LEVEL_SPAN if top > math.log(floor, FANOUT) else -math.inf
        upto = len(small) - 1
        while upto > start and levels[upto] < bottom:
            upto -= 1
        while start + FANOUT <= upto + 1:
            groups.append(small[start : start + FANOUT])
            start += FANOUT
        start = upto + 1
    return groups
