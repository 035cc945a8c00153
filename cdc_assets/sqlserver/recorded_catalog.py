"""A source's CDC catalog as recorded text: what :func:`~.catalog.discover` found, kept so that
the definitions can be built again while the source does not answer.

The record holds everything the definitions take from the catalog — per captured table its
capture instances, their captured columns with SQL Server types, key columns, start LSNs and
create dates — as JSON (``format`` 1). :func:`dump_catalog` and :func:`load_catalog` are exact
inverses: ``load_catalog(dump_catalog(found)) == found``. A record of another format, or one that
is not this JSON at all, raises :class:`RecordedCatalogError` with one line saying to refresh it.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from cdc_assets.lsn import Lsn

from .catalog import CaptureInstance, Column, SourceTable

__all__ = ["FORMAT", "RecordedCatalogError", "dump_catalog", "load_catalog"]

FORMAT = 1


class RecordedCatalogError(ValueError):
    """The recorded catalog cannot be read; the message says what to do."""


def _column(column: Column) -> dict[str, Any]:
    return {
        "name": column.name,
        "ordinal": column.ordinal,
        "type": column.type_name,
        "max_length": column.max_length,
        "precision": column.precision,
        "scale": column.scale,
        "nullable": column.nullable,
    }


def _instance(instance: CaptureInstance) -> dict[str, Any]:
    return {
        "name": instance.name,
        "start_lsn": instance.start_lsn.hex if instance.start_lsn is not None else None,
        "supports_net_changes": instance.supports_net_changes,
        "columns": [_column(c) for c in instance.columns],
        "key_columns": list(instance.key_columns),
        "create_date": instance.create_date.isoformat(),
        "index_name": instance.index_name,
    }


def dump_catalog(found: dict[tuple[str, str], SourceTable], *, discovered_at: str = "") -> str:
    """``found`` (keyed by ``(schema, table)``) as the recorded JSON text."""
    tables = [
        {
            "schema": table.schema,
            "name": table.name,
            "instances": [_instance(i) for i in table.instances],
        }
        for _, table in sorted(found.items())
    ]
    record = {"format": FORMAT, "discovered_at": discovered_at, "tables": tables}
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def _load_instance(schema: str, table: str, data: dict[str, Any]) -> CaptureInstance:
    columns = tuple(
        Column(
            name=c["name"],
            ordinal=int(c["ordinal"]),
            type_name=c["type"],
            max_length=int(c["max_length"]),
            precision=int(c["precision"]),
            scale=int(c["scale"]),
            nullable=bool(c["nullable"]),
        )
        for c in data["columns"]
    )
    start = data["start_lsn"]
    return CaptureInstance(
        name=data["name"],
        source_schema=schema,
        source_table=table,
        start_lsn=Lsn.from_hex(start) if start is not None else None,
        supports_net_changes=bool(data["supports_net_changes"]),
        columns=columns,
        key_columns=tuple(data["key_columns"]),
        create_date=dt.datetime.fromisoformat(data["create_date"]),
        index_name=data["index_name"],
    )


def load_catalog(
    text: str, *, origin: str = "the recorded catalog"
) -> dict[tuple[str, str], SourceTable]:
    """The catalog recorded in ``text``; :class:`RecordedCatalogError` if it cannot be read."""
    problem = ""
    try:
        record = json.loads(text)
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            got = record.get("format") if isinstance(record, dict) else None
            problem = f"format {got!r}, expected {FORMAT}"
        else:
            found = {}
            for table in record["tables"]:
                schema, name = table["schema"], table["name"]
                instances = tuple(_load_instance(schema, name, i) for i in table["instances"])
                found[(schema, name)] = SourceTable(schema, name, instances)
            return found
    except (ValueError, KeyError, TypeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    raise RecordedCatalogError(
        f"{origin} cannot be read ({problem}); record it again while the source answers "
        "(dg utils refresh-defs-state, or reload the code location)"
    )
