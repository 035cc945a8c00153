"""Where asset data lives: one directory per asset and partition, each an atomically published
version (:mod:`.versioned_parquet`) with a small properties file beside the Parquet files.

The properties are what the Dagster layer needs to know about a partition without reading it:
the LSN range or snapshot LSN, coverage, row counts. They are computed from the *written* data by
a ``finalize`` callback that runs after Spark has finished writing and before the pointer
switches, so a version is published together with its properties or not at all — and a callback
that raises (say, a validity check that failed) publishes nothing.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from . import versioned_parquet

PROPERTIES_FILE = "_cdc_properties.json"
GAP_FILE = "_cdc_gap.json"  # beside the versions: why a partition could not be written
UNPARTITIONED = "__all__"

Properties = dict[str, Any]
Finalize = Callable[[DataFrame], Mapping[str, Any]]


@dataclass(frozen=True)
class Published:
    """A version that is now current, with its properties."""

    version: Path
    properties: Properties


class AssetStore:
    """Versioned Parquet under ``base``: ``<base>/<key path>/<partition or __all__>/v-…/``."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)

    def location(self, key_path: Sequence[str], partition: str | None) -> Path:
        return self.base.joinpath(*key_path, partition or UNPARTITIONED)

    def write(
        self,
        spark: SparkSession,
        df: DataFrame,
        key_path: Sequence[str],
        partition: str | None,
        finalize: Finalize | None = None,
    ) -> Published:
        """Write ``df`` as a new version, compute its properties from the written files, then
        publish both atomically."""
        location = self.location(key_path, partition)
        version = versioned_parquet.write_version(df, location)
        properties: Properties = {}
        try:
            if finalize is not None:
                properties = dict(finalize(spark.read.parquet(str(version))))
            text = json.dumps(properties, sort_keys=True, default=str)
        except BaseException:
            shutil.rmtree(version, ignore_errors=True)  # refused: never published, not kept
            raise
        (version / PROPERTIES_FILE).write_text(text)
        versioned_parquet.publish_version(location, version.name)
        return Published(version, properties)

    def is_published(self, key_path: Sequence[str], partition: str | None) -> bool:
        return versioned_parquet.is_published(self.location(key_path, partition))

    def current_version(self, key_path: Sequence[str], partition: str | None) -> Path | None:
        try:
            return versioned_parquet.current_version(self.location(key_path, partition))
        except versioned_parquet.NotPublished:
            return None

    def properties(self, key_path: Sequence[str], partition: str | None) -> Properties | None:
        """The published version's properties; None when nothing is published."""
        version = self.current_version(key_path, partition)
        if version is None:
            return None
        try:
            return json.loads((version / PROPERTIES_FILE).read_text())
        except FileNotFoundError:
            return {}

    def mark_gap(self, key_path: Sequence[str], partition: str, gap: Mapping[str, Any]) -> None:
        """Record that ``partition`` cannot be written because changes are gone (atomically)."""
        location = self.location(key_path, partition)
        location.mkdir(parents=True, exist_ok=True)
        temporary = location / f".{GAP_FILE}.tmp"
        temporary.write_text(json.dumps(dict(gap), sort_keys=True, default=str))
        temporary.replace(location / GAP_FILE)

    def gap(self, key_path: Sequence[str], partition: str) -> Properties | None:
        try:
            return json.loads((self.location(key_path, partition) / GAP_FILE).read_text())
        except FileNotFoundError:
            return None

    def clear_gap(self, key_path: Sequence[str], partition: str) -> None:
        (self.location(key_path, partition) / GAP_FILE).unlink(missing_ok=True)

    def read(
        self, spark: SparkSession, key_path: Sequence[str], partition: str | None
    ) -> DataFrame:
        """The published version (:class:`~.versioned_parquet.NotPublished` if there is none)."""
        return versioned_parquet.read(spark, self.location(key_path, partition))
