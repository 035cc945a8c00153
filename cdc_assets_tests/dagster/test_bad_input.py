"""Bad input meets a clear error and writes nothing: a hand-typed partition key, a range out of
order, a database without CDC; and identifiers with quotes, brackets, spaces and unicode are
quoted end to end, never injected."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, RunRequest
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.config import parse_config
from cdc_assets.dagster.chain import range_partitions
from cdc_assets.dagster.names import PARTITION_TAG, SOURCE_TAG, partitions_name
from cdc_assets.dagster.source import load_source
from cdc_assets.emulator.demo_schema import ColumnDef, TableDef
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import CdcNotEnabled

from .conftest import SOURCE, SyncHarness, failure_text, make_harness


def _run(harness: SyncHarness, key: str) -> str:
    harness.instance.add_dynamic_partitions(partitions_name(SOURCE), [key])
    result = harness.execute(
        RunRequest(partition_key=key, tags={SOURCE_TAG: SOURCE, PARTITION_TAG: key})
    )
    assert not result.success
    return failure_text(result)


def test_a_hand_typed_partition_key_is_refused_with_what_to_do(harness: SyncHarness) -> None:
    harness.sync()
    text = _run(harness, "last-tuesday")
    assert "neither 'snapshot' nor an LSN range" in text
    assert not list(harness.source.storage.rglob("last-tuesday/v-*"))


def test_a_range_out_of_order_fails_the_chain_check(harness: SyncHarness) -> None:
    harness.sync()
    for _ in range(3):
        harness.workload.step()
    harness.capture()
    harness.sync()  # the chain has a first range now
    for _ in range(6):
        harness.workload.step()
    harness.capture()
    (request,) = harness.tick().run_requests
    planned = LsnRange.parse_key(request.partition_key)
    # A person adds a range that starts after the chain's end: the changes in between would
    # be skipped.
    skipping = LsnRange(planned.lo.increment(), planned.hi)
    harness.instance.delete_dynamic_partition(partitions_name(SOURCE), planned.key)
    result = harness.execute(
        RunRequest(partition_key=_add(harness, skipping.key), tags=request.tags)
    )
    assert not result.success
    chain = {
        e.asset_key: e for e in result.get_asset_check_evaluations() if e.check_name == "chain"
    }
    assert chain and not any(e.passed for e in chain.values())
    assert "are in no partition" in (next(iter(chain.values())).description or "")
    for table in harness.source.tables:
        state = harness.source.store.properties(table.mirror_key.path, None)
        assert state is None or skipping.key not in state.get("applied_ranges", [])


def _add(harness: SyncHarness, key: str) -> str:
    harness.instance.add_dynamic_partitions(partitions_name(SOURCE), [key])
    return key


def test_a_database_without_cdc_says_so(tmp_path: Path) -> None:
    db = tmp_path / "plain.db"
    conn = emulator.connect(str(db), autocommit=True)
    conn.cursor().execute("CREATE TABLE [dbo].[t] ([id] int NOT NULL PRIMARY KEY)")
    conn.close()
    config = parse_config(
        {
            "sources": [{"name": "plain", "connection": {"emulator": {"path": str(db)}}}],
            "storage": {"base_path": str(tmp_path / "storage")},
        },
        base_dir=tmp_path,
        origin="test",
    )
    with pytest.raises(CdcNotEnabled) as caught:
        load_source(config.sources[0], config.storage.base_path)
    assert "sp_cdc_enable_db" in str(caught.value)


WEIRD = TableDef(
    "dbo",
    'we]ird "näme"; DROP TABLE x --',
    (
        ColumnDef("key [1]", "int", nullable=False),
        ColumnDef('wert "€"', "nvarchar(40)", hint="name"),
        ColumnDef("qty", "int", hint="quantity"),
    ),
    primary_key=("key [1]",),
    capture_instance_name="dbo_weird",  # SQL Server wants a regular identifier here
)


def test_identifiers_with_quotes_brackets_spaces_and_unicode_sync_end_to_end(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(tmp_path, spark, instance, tables=(WEIRD,), rows=25)
    (table,) = harness.source.tables
    assert table.name == WEIRD.name
    harness.sync()
    for _ in range(8):
        harness.workload.step()
    harness.capture()
    harness.sync()
    assert range_partitions(instance.get_dynamic_partitions(partitions_name(SOURCE)))
    harness.assert_mirrors_equal_source()
    assert harness.mirror(table).count() == harness.workload.row_count(WEIRD.full_name) > 0
