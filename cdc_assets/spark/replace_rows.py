"""Some rows of an unpartitioned table replaced in one commit: those a predicate selects go, the
given rows come (Delta's ``replaceWhere``), e.g. the days an incremental aggregate recomputed.

The commit carries the table's properties (``userMetadata``, as every write of the store), which
``summarize`` computes from the table as it will be: its rows outside the predicate and the new
ones. A table that does not exist yet is written whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .asset_store import AssetStore
from .commit_metadata import NotPublished, Published, to_json
from .concurrent_commits import retry_conflicts
from .partition_rows import Finalize
from .stored_columns import TABLE_PROPERTIES, encode_for_delta


@dataclass(frozen=True)
class RowsReplaced:
    """The rows of the table matching ``predicate`` (Spark SQL over its columns) replaced by
    ``df`` (whose rows all match it), with the properties ``summarize`` computes from the whole
    table after the replacement."""

    df: DataFrame
    predicate: str
    summarize: Finalize | None = None

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        assert partition is None, "rows are replaced in unpartitioned tables"
        try:
            current = store.read(spark, key_path, None)
        except NotPublished:
            return store.write(spark, self.df, key_path, None, self.summarize)
        new = self.df.localCheckpoint(eager=True)  # read once: the summary and the write agree
        try:
            # replaceWhere removes the rows the predicate holds for (not those it is null for)
            kept = current.where(~F.coalesce(F.expr(self.predicate), F.lit(False)))
            after = kept.unionByName(new)
            properties = dict(self.summarize(after)) if self.summarize is not None else {}
            uri = store.location(key_path)
            writer = (
                encode_for_delta(new)
                .write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", self.predicate)
                .option("userMetadata", to_json(properties))
            )
            for key, value in TABLE_PROPERTIES.items():
                writer = writer.option(key, value)
            retry_conflicts(lambda: writer.save(uri), f"replacing rows of {uri}")
            return store.published(spark, uri, properties)
        finally:
            new.unpersist()
