"""Atomic publication of Parquet data: a directory of immutable versions and a pointer file.

Spark's Parquet overwrite is not atomic (a failed overwrite can delete the old data), so each write
goes to a fresh version directory ``<dir>/v-<time>-<random>/``; only when Spark has finished it does
``<dir>/_CURRENT`` switch to it, by writing a temporary file and ``os.replace`` (atomic on one
file system). A crash at any moment leaves ``_CURRENT`` naming a complete version (or no version:
the data was never published). Readers resolve ``_CURRENT`` once and read that version; versions
older than the previous one are removed after a publish, so a reader that resolved the pointer just
before the switch still finds its files.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

POINTER = "_CURRENT"
VERSION_PREFIX = "v-"


class NotPublished(LookupError):
    """Nothing has been published at this location yet."""


def current_version(location: Path) -> Path:
    """The version directory ``_CURRENT`` names; :class:`NotPublished` when there is none."""
    pointer = location / POINTER
    try:
        name = pointer.read_text().strip()
    except FileNotFoundError:
        raise NotPublished(f"no data has been published at {location}") from None
    version = location / name
    if not name.startswith(VERSION_PREFIX) or not version.is_dir():
        raise NotPublished(f"{pointer} names {name!r}, which is not a complete version")
    return version


def is_published(location: Path) -> bool:
    try:
        current_version(location)
    except NotPublished:
        return False
    return True


def publish(df: DataFrame, location: Path) -> Path:
    """Write ``df`` as a new version under ``location`` and switch ``_CURRENT`` to it atomically."""
    version = write_version(df, location)
    publish_version(location, version.name)
    return version


def write_version(df: DataFrame, location: Path) -> Path:
    """Write ``df`` into a new, not yet published version directory under ``location``."""
    location.mkdir(parents=True, exist_ok=True)
    name = f"{VERSION_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
    version = location / name
    df.write.mode("error").parquet(str(version))  # "errorifexists" is refused over Connect
    return version


def publish_version(location: Path, name: str) -> None:
    """Make the written version ``name`` current, then drop all but it and the version that was
    current before (readers may hold it). Not "the newest older name": after a crashed write that
    would be the crash's leftover, and the version readers hold would go."""
    try:
        previous: str | None = current_version(location).name
    except NotPublished:
        previous = None
    switch_pointer(location, name)
    prune_versions(location, keep={name, *([previous] if previous else [])})


def switch_pointer(location: Path, name: str) -> None:
    tmp = location / f".{POINTER}.{uuid.uuid4().hex}"
    with open(tmp, "w") as fh:
        fh.write(name)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, location / POINTER)


def prune_versions(location: Path, keep: set[str]) -> None:
    """Remove other versions, including the leftovers of crashed writes."""
    for entry in location.iterdir():
        if entry.name.startswith(VERSION_PREFIX) and entry.name not in keep:
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith(f".{POINTER}."):
            entry.unlink(missing_ok=True)


def read(spark: SparkSession, location: Path) -> DataFrame:
    """The currently published version as a DataFrame."""
    return spark.read.parquet(str(current_version(location)))
