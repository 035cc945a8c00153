"""The driver's writes of an asset's table: rows already in the driver, committed by delta-rs.

A small table's snapshot or a small range arrives as Arrow (:class:`RowsInDriver`); where
delta-rs may create the table or replace the partition (a local table, columns it writes as
Spark would) no Spark job runs at all, otherwise Spark writes them from the driver's copy.
:class:`DriverWrites` is part of :class:`.asset_store.AssetStore` (it uses the store's
``location``, ``write`` and properties helpers).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from .commit_metadata import (
    Published,
    last_commit_published,
    to_json,
)
from .delta_location import (
    is_local,
)
from .partition_rows import (
    PARTITION_COLUMN,
    PROPERTIES_COLUMN,
    STORED_COLUMNS,
    WRITE_ID,
    Finalize,
    Properties,
    arrow_fields,
    arrow_properties_row,
    as_partition_rows,
    missing_fields,
    stored_alike,
)
from .spark_sql_names import sql_string
from .stored_columns import (
    TABLE_PROPERTIES,
    encode_rows,
    stored_schema,
)

log = logging.getLogger(__name__)

# A new table of at most this many rows on a local file system is created from the driver by
# delta-rs: its rows collected as Arrow and committed in milliseconds, where Spark's Delta writer
# costs about half a second of jobs and log replays (a thousand small tables' first sync). Such a
# table has the features its columns need, no more: Spark turns timestampNtz on when a later
# write brings such a column (:meth:`AssetStore.write`), and deletion vectors are turned on by a
# mirror's first Spark MERGE (:mod:`.mirror_store`), so delta-rs leaves those properties out.
DRIVER_WRITE_ROWS = 10_000
# A partition replaced by delta-rs that lost to a concurrent commit (the maintenance job's) is
# written again in the driver this many times in all before Spark writes it.
DRIVER_WRITE_ATTEMPTS = 3
SET_BY_SPARK_LATER = ("delta.feature.timestampNtz", "delta.enableDeletionVectors")


@dataclass(frozen=True)
class RowsInDriver:
    """Rows a write takes from the driver, not from Spark (:meth:`AssetStore.write_in_driver`):
    ``read`` gives them as Arrow, with the columns of ``schema`` in its order."""

    schema: T.StructType
    read: Callable[[], pa.Table]


class DriverWrites:
    """:class:`.asset_store.AssetStore`'s writes from the driver (mixed into it)."""

    def write_in_driver(
        self,
        spark: SparkSession,
        rows: RowsInDriver,
        key_path: Sequence[str],
        partition: str | None,
        finalize: Finalize | None = None,
        *,
        later_columns: DataFrame | None = None,
        table_properties: Mapping[str, str] | None = None,
    ) -> Published:
        """:meth:`write` for rows read in the driver (a small table's snapshot, a small
        range): ``finalize`` is given them as Arrow, and where delta-rs may create the table or
        replace the partition (a local table, columns it writes as Spark would) no Spark job
        runs at all; otherwise Spark writes them from the driver's copy. Columns Delta cannot
        store as they are are stored as Spark's write stores them (:mod:`.stored_columns`)."""
        self.refuse_old_layout(key_path)
        collected = rows.read()
        properties = dict(finalize(collected)) if finalize is not None else {}
        schema = stored_schema(rows.schema)
        stored = encode_rows(rows.schema, collected)
        table_properties = {**TABLE_PROPERTIES, **(table_properties or {})}
        later = stored_schema(later_columns.schema) if later_columns is not None else None
        stamped = dict(properties)
        if partition is not None:
            stamped[WRITE_ID] = uuid.uuid4().hex
            stamped[STORED_COLUMNS] = schema.names
        if self._may_create_small(key_path, schema, later):
            small = self._create_from_arrow(
                key_path, schema, stored, partition, stamped, later, table_properties
            )
            if small is not None:
                return small
        elif partition is not None and arrow_fields(schema) is not None:
            replaced = self._replace_partition_in_driver(
                key_path, schema.names, partition, properties, stored, later, schema
            )
            if replaced is not None:
                return replaced
        df = spark.createDataFrame(collected, rows.schema)
        return self.write(
            spark,
            df,
            key_path,
            partition,
            lambda _: properties,
            table_properties=table_properties,
            read_once=False,
            later_columns=later_columns,
            rows=collected.num_rows,
        )

    def _replace_partition_in_driver(
        self,
        key_path: Sequence[str],
        columns: Sequence[str],
        partition: str,
        properties: Properties,
        rows: pa.Table | None = None,
        later: T.StructType | None = None,
        fields: T.StructType | None = None,
    ) -> Published | None:
        """Replace ``partition`` by ``rows`` (Arrow, in ``columns``; none: its properties row
        alone) and its properties row, with delta-rs (written again on the table as it is now
        when another writer committed meanwhile); None (Spark writes it) when the table is
        not on a local file system (delta-rs commits to object stores need a locking setup of
        their own), does not exist yet, or lacks one of ``columns`` or of ``later``'s or takes
        no nulls, or stores one of ``fields`` (the rows' columns as stored) or of ``later``'s
        with another type or field metadata (Spark's write evolves the schema)."""
        uri = self.location(key_path)
        if not is_local(uri):
            return None
        from deltalake.exceptions import CommitFailedError

        for attempt in range(1, DRIVER_WRITE_ATTEMPTS + 1):
            try:
                return self._replace_once(
                    key_path, columns, partition, properties, rows, later, fields
                )
            except CommitFailedError as exc:  # the maintenance job committed meanwhile
                if attempt == DRIVER_WRITE_ATTEMPTS:
                    log.warning("delta-rs could not write %s (%s); Spark writes it", uri, exc)
                    return None
                log.info("%s: lost to a concurrent commit (%s); written again", uri, exc)
        return None

    def _replace_once(
        self,
        key_path: Sequence[str],
        columns: Sequence[str],
        partition: str,
        properties: Properties,
        rows: pa.Table | None,
        later: T.StructType | None,
        fields: T.StructType | None,
    ) -> Published | None:
        """:meth:`_replace_partition_in_driver` on the table as it is now; raises delta-rs's
        ``CommitFailedError`` when another writer committed meanwhile."""
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import CommitFailedError, DeltaError

        uri = self.location(key_path)
        table = self._delta_rs(key_path)
        if table is None:
            return None
        schema = pa.schema(table.schema().to_arrow())
        if PARTITION_COLUMN not in schema.names:
            return None
        wanted = {*columns, *(later.names if later is not None else ())}
        if not wanted <= set(schema.names) or not all(f.nullable for f in schema):
            return None
        if not all(stored_alike(table, f) for f in (fields, later) if f is not None):
            return None
        properties = {**properties, WRITE_ID: uuid.uuid4().hex, STORED_COLUMNS: list(columns)}
        text = to_json(properties)
        data = arrow_properties_row(partition, text, schema)
        try:
            if rows is not None and rows.num_rows:
                data = pa.concat_tables([as_partition_rows(rows, schema, partition), data])
            write_deltalake(
                table,
                data,
                mode="overwrite",
                predicate=f"{PARTITION_COLUMN} = {sql_string(partition)}",
                commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
            )
        except CommitFailedError:
            raise
        except (DeltaError, pa.ArrowException) as exc:  # a feature or type it lacks
            log.warning("delta-rs could not write %s (%s); Spark writes it", uri, exc)
            return None
        table.update_incremental()
        return last_commit_published(table, uri, properties)

    def _create_small(
        self,
        key_path: Sequence[str],
        data: DataFrame,
        partition: str | None,
        properties: Properties,
        *,
        rows: int | None,
        held: bool,
        later: T.StructType | None,
        table_properties: Mapping[str, str],
    ) -> Published | None:
        """Create the table from ``data`` (encoded for Delta) with delta-rs, when it is new, on
        a local file system, and holds at most :data:`DRIVER_WRITE_ROWS` rows: ``rows`` (about
        how many it has) says so, or (``held``: ``data`` is read already) a collect of one row
        more finds fewer. The table is what Spark's write would make (same schema,
        partitioning, properties row and userMetadata). None when Spark must write it."""
        if not self._may_create_small(key_path, data.schema, later):
            return None
        if rows is not None:
            if rows > DRIVER_WRITE_ROWS:
                return None
            collected = data.toArrow()
        elif held:
            collected = data.limit(DRIVER_WRITE_ROWS + 1).toArrow()
            if collected.num_rows > DRIVER_WRITE_ROWS:
                return None
        else:
            return None
        return self._create_from_arrow(
            key_path, data.schema, collected, partition, properties, later, table_properties
        )

    def _may_create_small(
        self, key_path: Sequence[str], schema: T.StructType, later: T.StructType | None
    ) -> bool:
        """delta-rs may create the table (:meth:`_create_from_arrow`): it is new, on a local
        file system, and its columns are of types delta-rs writes as Spark would."""
        if not is_local(self.location(key_path)) or self._delta_rs(key_path) is not None:
            return False
        fields = arrow_fields(schema)
        return fields is not None and arrow_fields(missing_fields(schema, later)) is not None

    def _create_from_arrow(
        self,
        key_path: Sequence[str],
        schema: T.StructType,
        collected: Any,
        partition: str | None,
        properties: Properties,
        later: T.StructType | None,
        table_properties: Mapping[str, str],
    ) -> Published | None:
        """Create the table with delta-rs from ``collected`` (Arrow, ``schema``'s columns, encoded
        for Delta), as Spark's write would; None when delta-rs cannot (Spark writes it)."""
        from deltalake import CommitProperties, write_deltalake
        from deltalake.exceptions import DeltaError

        uri = self.location(key_path)
        fields = arrow_fields(schema)
        later_fields = arrow_fields(missing_fields(schema, later))
        assert fields is not None and later_fields is not None  # _may_create_small
        count = collected.num_rows
        arrays = [collected.column(i).cast(f.type) for i, f in enumerate(fields)]
        text = to_json(properties)
        if partition is not None:  # the partition columns first (partition_rows)
            first = [
                pa.field(PARTITION_COLUMN, pa.string()),
                pa.field(PROPERTIES_COLUMN, pa.string()),
            ]
            arrays = [
                pa.array([partition] * count, pa.string()),
                pa.nulls(count, pa.string()),
                *arrays,
                *(pa.nulls(count, f.type) for f in later_fields),
            ]
            fields = [*first, *fields, *later_fields]
        table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
        if partition is not None:
            marker = arrow_properties_row(partition, text, table.schema)
            table = pa.concat_tables([table, marker])
        configuration = {k: v for k, v in table_properties.items() if k not in SET_BY_SPARK_LATER}
        try:
            write_deltalake(
                uri,
                table,
                mode="error",  # created by nobody else meanwhile
                configuration=configuration or None,
                commit_properties=CommitProperties(custom_metadata={"userMetadata": text}),
            )
        except (DeltaError, pa.ArrowException) as exc:  # created meanwhile, a type it lacks ...
            log.warning("delta-rs could not create %s (%s); Spark writes it", uri, exc)
            return None
        created = self._delta_rs(key_path)
        assert created is not None
        return last_commit_published(created, uri, properties)
