"""SQL Server types -> Arrow types, for every type, and rows -> record batches."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_assets.sqlserver.arrow_types import (
    COMMIT_TIME,
    METADATA_FIELDS,
    arrow_mapping,
    arrow_schema,
    rows_to_record_batch,
)
from cdc_assets.sqlserver.catalog import Column

EXPECTED: list[tuple[str, int, int, pa.DataType]] = [
    ("tinyint", 3, 0, pa.int16()),
    ("smallint", 5, 0, pa.int16()),
    ("int", 10, 0, pa.int32()),
    ("bigint", 19, 0, pa.int64()),
    ("bit", 1, 0, pa.bool_()),
    ("decimal", 12, 2, pa.decimal128(12, 2)),
    ("numeric", 38, 10, pa.decimal128(38, 10)),
    ("numeric", 25, 0, pa.decimal128(25, 0)),
    ("money", 19, 4, pa.decimal128(19, 4)),
    ("smallmoney", 10, 4, pa.decimal128(10, 4)),
    ("float", 53, 0, pa.float64()),
    ("real", 24, 0, pa.float32()),
    ("char", 0, 0, pa.string()),
    ("varchar", 0, 0, pa.string()),
    ("nchar", 0, 0, pa.string()),
    ("nvarchar", 0, 0, pa.string()),
    ("text", 0, 0, pa.string()),
    ("ntext", 0, 0, pa.string()),
    ("xml", 0, 0, pa.string()),
    ("uniqueidentifier", 0, 0, pa.string()),
    ("sysname", 0, 0, pa.string()),
    ("binary", 0, 0, pa.binary()),
    ("varbinary", 0, 0, pa.binary()),
    ("image", 0, 0, pa.binary()),
    ("timestamp", 0, 0, pa.binary()),
    ("rowversion", 0, 0, pa.binary()),
    ("date", 10, 0, pa.date32()),
    ("time", 16, 7, pa.time64("us")),
    ("datetime", 23, 3, pa.timestamp("us")),
    ("datetime2", 27, 7, pa.timestamp("us")),
    ("smalldatetime", 16, 0, pa.timestamp("us")),
    ("datetimeoffset", 34, 7, pa.timestamp("us", tz="UTC")),
]


@pytest.mark.parametrize(("type_name", "precision", "scale", "expected"), EXPECTED)
def test_known_types(type_name: str, precision: int, scale: int, expected: pa.DataType) -> None:
    mapping = arrow_mapping(type_name, precision, scale)
    assert mapping.type == expected
    assert mapping.warning is None
    assert (mapping.converter is None) == (type_name != "datetimeoffset")
    assert arrow_mapping(type_name.upper(), precision, scale).type == expected


@pytest.mark.parametrize(
    "type_name", ["sql_variant", "hierarchyid", "geometry", "geography", "Phone"]
)
def test_unknown_types_become_strings_with_a_warning(type_name: str) -> None:
    mapping = arrow_mapping(type_name)
    assert mapping.type == pa.string()
    assert mapping.warning is not None and type_name in mapping.warning
    assert mapping.converter is not None
    assert mapping.converter(b"\x01\xab") == "0x01AB"
    assert mapping.converter(12) == "12" and mapping.converter(None) is None


def test_bad_decimal_precision_is_carried_as_string() -> None:
    mapping = arrow_mapping("decimal", 0, 0)
    assert mapping.type == pa.string() and mapping.warning


def column(
    name: str, type_name: str, precision: int = 0, scale: int = 0, nullable: bool = True
) -> Column:
    return Column(name, 1, type_name, 0, precision, scale, nullable)


def test_schema_never_drops_a_column_and_records_warnings() -> None:
    columns = [
        column("id", "int", 10, nullable=False),
        column("shape", "geometry"),
        column("price", "money", 19, 4),
    ]
    result = arrow_schema(columns, prefix=METADATA_FIELDS, suffix=(COMMIT_TIME,))
    assert result.schema.names == [
        "__$start_lsn",
        "__$command_id",
        "__$seqval",
        "__$operation",
        "__$update_mask",
        "id",
        "shape",
        "price",
        "__$commit_time",
    ]
    assert result.schema.field("__$operation").type == pa.int32()
    assert result.schema.field("__$command_id").type == pa.int32()
    assert result.schema.field("__$start_lsn").type == pa.binary()
    assert result.schema.field("__$commit_time").type == pa.timestamp("us")
    assert not result.schema.field("id").nullable
    assert len(result.warnings) == 1 and "shape" in result.warnings[0]
    assert arrow_schema(columns, all_nullable=True).schema.field("id").nullable


def test_rows_to_record_batch_all_types() -> None:
    columns = [
        column("tiny", "tinyint"),
        column("flag", "bit"),
        column("amount", "decimal", 12, 2),
        column("cash", "money", 19, 4),
        column("ratio", "real"),
        column("label", "nvarchar"),
        column("guid", "uniqueidentifier"),
        column("blob", "varbinary"),
        column("day", "date"),
        column("at", "time", 16, 7),
        column("ts", "datetime2", 27, 7),
        column("tz", "datetimeoffset", 34, 7),
        column("odd", "sql_variant"),
    ]
    result = arrow_schema(columns)
    plus2 = dt.timezone(dt.timedelta(hours=2))
    rows = [
        (
            255,
            True,
            Decimal("1234567890.12"),
            Decimal("-922337203685477.5808"),
            1.5,
            "Grüße 漢",
            "6F9619FF-8B86-D011-B42D-00C04FC964FF",
            b"\x00\xff",
            dt.date(2024, 2, 29),
            dt.time(23, 59, 59, 999999),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
            dt.datetime(2024, 1, 1, 12, 0, tzinfo=plus2),
            b"\x01",
        ),
        (None,) * 13,
    ]
    batch = rows_to_record_batch(rows, result.schema, result.converters)
    assert batch.num_rows == 2 and batch.schema == result.schema
    first = batch.to_pylist()[0]
    assert first["tiny"] == 255 and first["cash"] == Decimal("-922337203685477.5808")
    assert first["tz"] == dt.datetime(2024, 1, 1, 10, 0, tzinfo=dt.UTC)
    assert first["odd"] == "0x01" and first["blob"] == b"\x00\xff"
    assert batch.to_pylist()[1] == dict.fromkeys(result.schema.names)


def test_rows_to_record_batch_empty_and_width_mismatch() -> None:
    schema = pa.schema([pa.field("a", pa.int32())])
    assert rows_to_record_batch([], schema).num_rows == 0
    with pytest.raises(ValueError):
        rows_to_record_batch([(1, 2)], schema)
