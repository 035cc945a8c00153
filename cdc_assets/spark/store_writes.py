"""What the IO manager commits: a write of one of the stores, typed, that reads its rows and
computes its properties itself (nothing above ``spark/`` is called during a write).

The writes: :class:`FrameWrite` (a DataFrame, with properties from its rows: an asset that is
not a change log, mirror or history), :mod:`.change_log_store`'s snapshot and range writes,
:class:`.mirror_store.MirrorWrite`, :class:`.history_store.HistoryWrite`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession

from .asset_store import AssetStore
from .commit_metadata import Published
from .partition_rows import Finalize


class StoreWrite(Protocol):
    """One commit to the asset at ``key_path`` (``partition``: None for an unpartitioned one)."""

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published: ...


@dataclass(frozen=True)
class FrameWrite:
    """``df`` written whole (or as ``partition``), with the properties ``summarize`` computes
    from the rows read (held, so they are the rows committed) when given."""

    df: DataFrame
    summarize: Finalize | None = None

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        return store.write(spark, self.df, key_path, partition, self.summarize)
