"""Some rows of an unpartitioned table replaced in one commit: those whose ``column`` holds one
of some values go, the given rows come (Delta's ``replaceWhere``), e.g. the days an incremental
aggregate recomputed.

The commit carries the table's properties (``userMetadata``, as every write of the store), which
``summarize`` computes from the table as it will be: its rows outside the values and the new
ones. Rows held in the driver (Arrow) replace those of a small table on a local file system by
delta-rs (``write_deltalake(mode="overwrite", predicate=...)``: no Spark job); otherwise Spark
writes. A table that does not exist yet is written whole.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .asset_store import AssetStore
from .commit_metadata import NotPublished, Published, last_commit_published, to_json
from .concurrent_commits import retry_conflicts
from .delta_location import delta_rs_storage_options, delta_rs_uri, is_local
from .partition_rows import Finalize
from .stored_columns import TABLE_PROPERTIES, encode_for_delta

DRIVER_TABLE_ROWS = 100_000  # a table of at most this many rows takes Arrow rows in the driver


@dataclass(frozen=True)
class RowsReplaced:
    """The rows of the table whose ``column`` holds one of ``values`` (None: null) replaced by
    ``rows`` (a DataFrame, or Arrow rows held in the driver, all of them with such a value),
    with the properties ``summarize`` computes from the whole table after the replacement."""

    rows: DataFrame | pa.Table
    column: str
    values: Sequence[Any]
    summarize: Finalize | None = None

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        assert partition is None, "rows are replaced in unpartitioned tables"
        if isinstance(self.rows, pa.Table):
            published = self._in_driver(store, key_path)
            if published is not None:
                return published
        new = self.rows if isinstance(self.rows, DataFrame) else spark.createDataFrame(self.rows)
        try:
            current = store.read(spark, key_path, None)
        except NotPublished:
            return store.write(spark, new, key_path, None, self.summarize)
        held = new.localCheckpoint(eager=True)  # read once: the summary and the write agree
        try:
            kept = current.where(~F.coalesce(F.expr(self.predicate()), F.lit(False)))
            properties = dict(self.summarize(kept.unionByName(held))) if self.summarize else {}
            uri = store.location(key_path)
            writer = (
                encode_for_delta(held)
                .write.format("delta")
                .mode("overwrite")
                .option("replaceWhere", self.predicate())
                .option("userMetadata", to_json(properties))
            )
            for key, value in TABLE_PROPERTIES.items():
                writer = writer.option(key, value)
            retry_conflicts(lambda: writer.save(uri), f"replacing rows of {uri}")
            return store.published(spark, uri, properties)
        finally:
            held.unpersist()

    def predicate(self) -> str:
        """The rows replaced, in SQL (Spark's and delta-rs's: the column a plain name)."""
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.column), self.column
        name = self.column
        given = [v for v in self.values if v is not None]
        parts = [f"{name} IN ({', '.join(_literal(v) for v in given)})"] if given else []
        if len(given) < len(self.values):
            parts.append(f"{name} IS NULL")
        return " OR ".join(parts) or "FALSE"

    def _in_driver(self, store: AssetStore, key_path: Sequence[str]) -> Published | None:
        """Replace the rows by delta-rs; None where Spark must (not local, no table yet, a
        large table, one with deletion vectors)."""
        from deltalake import CommitProperties, write_deltalake

        assert isinstance(self.rows, pa.Table)
        uri = store.location(key_path)
        table = store.delta_table(key_path) if is_local(uri) else None
        if table is None:
            return None
        if "deletionVectors" in (table.protocol().reader_features or []):
            return None
        files = pa.table(table.get_add_actions(flatten=True)).to_pydict()
        if sum(files.get("num_records") or [DRIVER_TABLE_ROWS + 1]) > DRIVER_TABLE_ROWS:
            return None
        schema = pa.schema(table.schema().to_arrow())
        current = pa.table(table.to_pyarrow_table())
        new = self.rows.select(schema.names).cast(schema)
        column = current.column(self.column)
        given = [v for v in self.values if v is not None]
        replaced = pc.is_in(column, value_set=pa.array(given, column.type))
        if len(given) < len(self.values):
            replaced = pc.or_(replaced, pc.is_null(column))
        kept = current.filter(pc.invert(pc.fill_null(replaced, False)))
        properties = dict(self.summarize(pa.concat_tables([kept, new]))) if self.summarize else {}
        write_deltalake(
            delta_rs_uri(uri),
            new,
            mode="overwrite",
            predicate=self.predicate(),
            storage_options=delta_rs_storage_options(),
            commit_properties=CommitProperties(
                custom_metadata={"userMetadata": to_json(properties)}
            ),
        )
        written = store.delta_table(key_path)
        assert written is not None
        return last_commit_published(written, uri, properties)


def _literal(value: Any) -> str:
    """``value`` as a SQL literal (dates, numbers and text)."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"
