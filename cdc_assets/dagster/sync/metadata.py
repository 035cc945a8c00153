"""Metadata a person can read in the UI: the schema with SQL Server and Spark types, column
lineage to the source table, owners and tags, the mirrors' freshness policy; for partitions, LSNs
with commit times, rows per operation, lag."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetKey,
    FreshnessPolicy,
    MetadataValue,
    TableColumn,
    TableColumnConstraints,
    TableColumnDep,
    TableColumnLineage,
    TableSchema,
)

from cdc_assets.config import SourceConfig
from cdc_assets.lsn import OPERATION_NAMES
from cdc_assets.spark.sqlserver_source import spark_type_names
from cdc_assets.sqlserver import CaptureInstance
from cdc_assets.sqlserver.type_text import sql_type_text

from .names import SOURCE_TAG

COLUMN_LINEAGE = "dagster/column_lineage"


def column_schema(instance: CaptureInstance) -> TableSchema:
    """The captured columns: SQL Server type as the column type, the Spark type it is stored
    as (and the key) in the description."""
    keys = set(instance.key_columns)
    spark_types = spark_type_names(instance.columns)
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=sql_type_text(c),
                description=("primary key; " if c.name in keys else "")
                + (f"{c.mask.describe()}; " if c.mask is not None else "")
                + f"stored as Spark {spark_types[c.name]}",
                constraints=TableColumnConstraints(nullable=c.nullable),
            )
            for c in instance.columns
        ]
    )


def column_rules_text(instance: CaptureInstance) -> str:
    """``email: hash; phone: redact; ssn: excluded (never read)`` or ``none`` (never the key)."""
    parts = [f"{c.name}: {c.mask.rule}" for c in instance.columns if c.mask is not None]
    parts += [f"{name}: excluded (never read)" for name in instance.excluded_columns]
    return "; ".join(parts) or "none"


def column_lineage(
    columns: Sequence[str], upstream: AssetKey, upstream_columns: Mapping[str, str] | None = None
) -> TableColumnLineage:
    """Each of ``columns`` comes from the same-named column of ``upstream`` (or the one
    ``upstream_columns`` maps it to)."""
    renamed = upstream_columns or {}
    return TableColumnLineage(
        deps_by_column={
            c: [TableColumnDep(asset_key=upstream, column_name=renamed.get(c, c))] for c in columns
        }
    )


def asset_tags(config: SourceConfig, schema: str) -> dict[str, str]:
    """Tags to filter the catalog by: the source and the SQL Server schema."""
    return {SOURCE_TAG: config.name, "sqlserver/schema": tag_value(schema)}


def tag_value(text: str) -> str:
    """Dagster tag values: at most 63 of ``A-Za-z0-9_.-``."""
    cleaned = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "_.-" else "_" for ch in text)
    return cleaned[:63] or "_"


def mirror_freshness(config: SourceConfig) -> FreshnessPolicy:
    """Overdue (FAIL) when the mirror has not moved for the sync policy's window (see
    :meth:`SyncPolicy.freshness_windows`), WARN at a third of it."""
    warn, fail = config.sync.freshness_windows()
    return FreshnessPolicy.time_window(
        fail_window=dt.timedelta(seconds=fail), warn_window=dt.timedelta(seconds=warn)
    )


def table_metadata(instance: CaptureInstance, qualified_name: str) -> dict[str, Any]:
    """Definition metadata shared by a table's change log and mirror."""
    return {
        "sqlserver/table": qualified_name,
        "sqlserver/capture_instance": instance.name,
        "sqlserver/key_columns": ", ".join(instance.key_columns)
        or "(none: mirrored as a multiset)",
        "dagster/column_schema": column_schema(instance),
        **(
            {"cdc_assets/column_rules": column_rules_text(instance)}
            if instance.excluded_columns or any(c.mask is not None for c in instance.columns)
            else {}
        ),
    }


def operation_counts(counts: Mapping[str, int]) -> dict[str, Any]:
    return {f"rows_{name}": int(counts.get(name, 0)) for name in OPERATION_NAMES.values()}


def text(value: Any) -> MetadataValue:
    return MetadataValue.text("" if value is None else str(value))
