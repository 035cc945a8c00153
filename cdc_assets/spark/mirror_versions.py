"""A mirror's position, kept in each commit's ``userMetadata`` (the LSN it reached, the snapshot
it is built from, its rows, the commit time of the last change it applied), and the mirror as
of an LSN: the table's history maps each LSN the mirror reached to a Delta version."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import Lsn
from cdc_assets.records import MirrorPosition

from .commit_metadata import NotPublished
from .stored_columns import decode_from_delta

LSN = "lsn"  # the property holding the LSN a mirror commit reached (Lsn.hex)


ROWS = "rows"  # ... and the mirror's rows after it


SNAPSHOT_VERSION = "snapshot_version"  # ... the write id of the snapshot it is built from


COMMIT_TIME = "as_of_commit_time"  # ... the commit time of the last change it applied


COLUMNS = "columns"  # ... and its columns


def position_of(properties: Mapping[str, Any] | None) -> MirrorPosition | None:
    """The position a mirror commit recorded in its properties (its ``userMetadata``); None for
    a mirror without a commit that has properties."""
    if not properties:
        return None
    text = properties.get(LSN)
    lsn = Lsn.parse(text) if text else None
    rows = properties.get(ROWS)
    columns = properties.get(COLUMNS)
    return MirrorPosition(
        lsn=lsn,
        snapshot_version=properties.get(SNAPSHOT_VERSION),
        rows=rows if isinstance(rows, int) else None,
        commit_lsn=lsn,
        commit_time=properties.get(COMMIT_TIME),
        columns=tuple(columns) if columns is not None else None,
    )


def position_properties(position: MirrorPosition) -> dict[str, Any]:
    """The properties a mirror commit records of ``position`` (those :func:`position_of` reads;
    the rows, commit time and columns only when known): the commit's own LSN is ``lsn``."""
    assert position.lsn is not None, "a mirror commit records the LSN it reached"
    found: dict[str, Any] = {LSN: position.lsn.hex, SNAPSHOT_VERSION: position.snapshot_version}
    if position.rows is not None:
        found[ROWS] = position.rows
    if position.commit_time is not None:
        found[COMMIT_TIME] = position.commit_time
    if position.columns is not None:
        found[COLUMNS] = list(position.columns)
    return found


def lsn_versions(spark: SparkSession, uri: str) -> list[tuple[Lsn, int]]:
    """(LSN, Delta version) for every commit of the mirror that recorded an LSN, oldest first
    (as far back as the Delta log keeps history: ``delta.logRetentionDuration``)."""
    rows = spark.sql(f"DESCRIBE HISTORY delta.`{uri}`").select("version", "userMetadata")
    found = []
    for row in rows.collect():
        if not row["userMetadata"]:
            continue
        try:
            lsn = json.loads(row["userMetadata"]).get(LSN)
        except ValueError:
            continue
        if lsn:
            found.append((Lsn.parse(lsn), int(row["version"])))
    return sorted(found, key=lambda pair: pair[1])


def read_mirror_as_of(spark: SparkSession, path: str, lsn: Lsn | str) -> DataFrame:
    """The mirror at ``path`` (its Delta table) as it was at ``lsn``: the newest version whose
    recorded LSN is at or below ``lsn``. :class:`NotPublished` if the mirror had not reached it
    (or the log no longer goes back that far).

    ``lsn`` is an :class:`~cdc_assets.lsn.Lsn` or any text :meth:`Lsn.parse` accepts.
    """
    target = lsn if isinstance(lsn, Lsn) else Lsn.parse(lsn)
    candidates = [version for at, version in lsn_versions(spark, path) if at <= target]
    if not candidates:
        raise NotPublished(f"the mirror at {path} has no version at or before {target.hex}")
    version = max(candidates)
    return decode_from_delta(spark.read.format("delta").option("versionAsOf", version).load(path))
