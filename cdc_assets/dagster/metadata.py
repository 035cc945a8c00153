"""Materialization metadata a person can read: LSNs with commit times, rows per operation, lag,
the schema with SQL Server types."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from cdc_assets.sqlserver import CaptureInstance, Column

OPERATION_NAMES = {1: "delete", 2: "insert", 3: "update_before", 4: "update_after"}


def sql_type_text(column: Column) -> str:
    """``decimal(12,2)``, ``nvarchar(40)``, ``varbinary(max)``, ``datetime2(7)``…"""
    name = column.type_name
    if name in ("decimal", "numeric"):
        return f"{name}({column.precision},{column.scale})"
    if name in ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar"):
        if column.max_length == -1:
            return f"{name}(max)"
        length = column.max_length // 2 if name.startswith("n") else column.max_length
        return f"{name}({length})"
    if name in ("datetime2", "time", "datetimeoffset"):
        return f"{name}({column.scale})"
    return name


def column_schema(instance: CaptureInstance) -> TableSchema:
    keys = set(instance.key_columns)
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=sql_type_text(c),
                description="primary key" if c.name in keys else None,
                constraints=TableColumnConstraints(nullable=c.nullable),
            )
            for c in instance.columns
        ]
    )


def table_metadata(instance: CaptureInstance, qualified_name: str) -> dict[str, Any]:
    """Definition metadata shared by a table's change log and mirror."""
    return {
        "sqlserver/table": qualified_name,
        "sqlserver/capture_instance": instance.name,
        "sqlserver/key_columns": ", ".join(instance.key_columns)
        or "(none: mirrored as a multiset)",
        "dagster/column_schema": column_schema(instance),
    }


def operation_counts(counts: Mapping[str, int]) -> dict[str, Any]:
    return {f"rows_{name}": int(counts.get(name, 0)) for name in OPERATION_NAMES.values()}


def text(value: Any) -> MetadataValue:
    return MetadataValue.text("" if value is None else str(value))
