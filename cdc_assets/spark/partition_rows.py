"""How a change log keeps its partitions in one Delta table: the partition-properties protocol.

Every partition's rows are marked by the partition-key column ``_cdc_partition``. Writing a
partition replaces exactly that partition's rows (Spark's ``replaceWhere``, delta-rs's
``predicate``) in one commit that also holds the partition's *properties* — LSNs, coverage,
counts — as one extra "properties row" (``_cdc_properties`` set, every data column null). So the
properties are in the same commit and the same files as the rows, survive log cleanup, are read
without scanning the data and exist for empty partitions too. A partition that cannot be written
(changes removed by cleanup) is a properties row alone that records the gap.

``_cdc_partition`` is a column, not the table's physical partitioning (a folder, and so at least
a file, per range for ever): the two columns come first in a change log's schema, so every
writer keeps file statistics of them, and files are found by those statistics (a range key is
its LSNs in hex, so keys sort in LSN order and consecutive ranges, compacted into one file by
:mod:`.compaction`, give a file a narrow interval of keys). Readers take the files whose
statistics may hold a partition and filter the rows. A change log of the old layout
(partitioned by the column) is read the same way and rewritten once by :mod:`.compaction`.

Here: the names of that protocol, reading properties rows with delta-rs, and the partition rows
as Arrow for the driver's writes (:mod:`.asset_store` commits them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .spark_sql_names import column
from .stored_columns import decode_from_delta

PARTITION_COLUMN = "_cdc_partition"


PROPERTIES_COLUMN = "_cdc_properties"


# A change log's snapshot partition (dagster.sync.names.SNAPSHOT_PARTITION): its key sorts after
# every range key, and a re-snapshot replaces it whole, so its files are compacted apart.
SNAPSHOT_PARTITION = "snapshot"


WRITE_ID = "write_id"  # in every partition's properties: tells one write of it from another


# ... and the partition's own columns (as stored): the table's schema is the union of all
# partitions' columns (the snapshot's, the ranges', those before and after a schema change).
STORED_COLUMNS = "stored_columns"


GAP = "gap"  # a partition's properties when it could not be written: {"gap": {...}}


# A partition written in several commits (a snapshot's chunks, :mod:`.chunk_commits`) has a
# properties row per commit: the newest (highest COMMIT_SEQ) is the partition's; while it says
# IN_PROGRESS the partition is not published (its rows are a part of it).
COMMIT_SEQ = "commit_seq"


IN_PROGRESS = "in_progress"


Properties = dict[str, Any]


# computes a partition's properties from its rows: a Spark frame, or Arrow when read in the driver
Finalize = Callable[[DataFrame | pa.Table], Mapping[str, Any]]


def properties_in(table: Any, partitions: Sequence[str]) -> dict[str, Properties]:
    """The properties rows of ``partitions`` in the delta-rs ``table`` (those that have one)."""
    import pyarrow.compute as pc

    names = {f.name for f in table.schema().fields}
    if PARTITION_COLUMN not in names:
        return {}
    dataset = table.to_pyarrow_dataset(file_pruning_predicate=of_partitions(partitions))
    rows = dataset.to_table(
        columns=[PARTITION_COLUMN, PROPERTIES_COLUMN],
        filter=pc.field(PROPERTIES_COLUMN).is_valid() & in_partitions(partitions),
        use_threads=False,  # see sync_state_store.read_rows: an abort at exit otherwise
    ).to_pylist()
    found: dict[str, Properties] = {}
    for r in rows:
        properties = json.loads(r[PROPERTIES_COLUMN])
        held = found.get(r[PARTITION_COLUMN])
        if held is None or properties.get(COMMIT_SEQ, -1) > held.get(COMMIT_SEQ, -1):
            found[r[PARTITION_COLUMN]] = properties
    return found


def of_partitions(partitions: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """delta-rs's file pruning for ``partitions``: the files whose statistics (or, in the old
    layout, partition values) may hold one of them; rows still to be filtered
    (:func:`in_partitions`)."""
    return [(PARTITION_COLUMN, "in", list(partitions))]


def in_partitions(partitions: Sequence[str]) -> Any:
    """The rows of ``partitions`` (a pyarrow dataset filter)."""
    import pyarrow.compute as pc

    return pc.field(PARTITION_COLUMN).isin(list(partitions))


def stored_column_names(found: Mapping[str, Properties], partitions: Sequence[str]) -> list[str]:
    """The columns ``partitions`` were written with (their properties say), in order."""
    columns: list[str] = []
    for p in partitions:
        for name in (found.get(p) or {}).get(STORED_COLUMNS) or []:
            if name not in columns:
                columns.append(name)
    return columns


def data_rows(df: DataFrame, columns: Sequence[str]) -> DataFrame:
    """The data rows of a change log's read (properties rows dropped), with ``columns`` (those
    the table has; all but the partitioning ones when none is known), decoded."""
    df = df.where(F.col(PROPERTIES_COLUMN).isNull())
    kept = [c for c in columns if c in df.columns]
    if kept:
        df = df.select(*[column(c) for c in kept])
    else:
        df = df.drop(PARTITION_COLUMN, PROPERTIES_COLUMN)
    return decode_from_delta(df)


# The column types delta-rs writes as the Delta type Spark's writer gives them (a variant, say,
# would become a struct): those of SQL Server's columns, as the source reads them.
ARROW_SAFE_TYPES = (
    T.BooleanType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
    T.DecimalType,
    T.StringType,
    T.BinaryType,
    T.DateType,
    T.TimestampType,
    T.TimestampNTZType,
)


def arrow_fields(schema: T.StructType) -> list[Any] | None:
    """The Arrow fields of a table Spark's writer would create from ``schema``: every column
    nullable, the field metadata kept; None when a type is not among :data:`ARROW_SAFE_TYPES` or
    some metadata is not text (delta-rs keeps text only)."""
    from pyspark.sql.pandas.types import to_arrow_type

    if not all(isinstance(f.dataType, ARROW_SAFE_TYPES) for f in schema.fields):
        return None
    if not all(isinstance(v, str) for f in schema.fields for v in f.metadata.values()):
        return None
    return [
        pa.field(f.name, to_arrow_type(f.dataType, timezone="UTC"), True, f.metadata or None)
        for f in schema.fields
    ]


def arrow_properties_row(partition: str, text: str, schema: pa.Schema) -> pa.Table:
    """A partition's properties row (every other column null) as delta-rs commits it."""
    return pa.Table.from_pylist([{PARTITION_COLUMN: partition, PROPERTIES_COLUMN: text}], schema)


def as_partition_rows(rows: pa.Table, schema: pa.Schema, partition: str) -> pa.Table:
    """``rows`` as data rows of ``partition`` in a table of ``schema``: its columns cast to the
    table's types, the table's other columns null, the properties column too."""
    count = rows.num_rows
    arrays = [
        pa.array([partition] * count, f.type)
        if f.name == PARTITION_COLUMN
        else rows.column(f.name).cast(f.type)
        if f.name in rows.column_names
        else pa.nulls(count, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def has_timestamp_ntz(schema: T.StructType) -> bool:
    return any("timestamp_ntz" in f.dataType.simpleString() for f in schema.fields)


def stored_alike(table: Any, fields: T.StructType) -> bool:
    """The delta-rs ``table`` has the columns of ``fields`` with their Delta types and field
    metadata (a ``time`` column stored as text, say, and not as plain text)."""
    found = T.StructType.fromJson(json.loads(table.schema().to_json()))
    have = {f.name: f for f in found.fields}
    return all(
        f.name in have
        and have[f.name].dataType == f.dataType
        and (have[f.name].metadata or {}) == (f.metadata or {})
        for f in fields.fields
    )


def missing_fields(schema: T.StructType, wanted: T.StructType | None) -> T.StructType:
    """The fields of ``wanted`` that ``schema`` lacks."""
    names = set(schema.names)
    return T.StructType([f for f in (wanted.fields if wanted else []) if f.name not in names])


def with_null_columns(df: DataFrame, schema: T.StructType) -> DataFrame:
    """``df`` with the fields of ``schema`` it lacks, as nulls of their types."""
    missing = missing_fields(df.schema, schema).fields
    nulls = [
        F.lit(None).cast(f.dataType).alias(f.name, metadata=f.metadata or None) for f in missing
    ]
    return df.select("*", *nulls) if nulls else df
