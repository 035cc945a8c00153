"""Bad input meets a clear error and writes nothing: a hand-typed partition key, a range out of
order, a database without CDC, an include naming no captured table, a keyless table that cannot
be snapshotted consistently, a table whose capture instance was dropped; and identifiers with
quotes, brackets, spaces and unicode are quoted end to end, never injected."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, RunRequest
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.config import ConfigError, ProjectConfig, parse_config
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.names import (
    PARTITION_TAG,
    SNAPSHOT_PARTITION,
    SOURCE_TAG,
    partitions_name,
)
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import CdcNotEnabled, cdc_admin
from cdc_assets.workload import ColumnDef, TableDef

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
    assert not list(Path(harness.source.storage).rglob("*last-tuesday*"))


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


def _config(tmp_path: Path, db: Path, include: list[str]) -> ProjectConfig:
    return parse_config(
        {
            "sources": [
                {
                    "name": SOURCE,
                    "connection": {"emulator": {"path": str(db)}},
                    "tables": {"include": include},
                }
            ],
            "storage": {"base_path": str(tmp_path / "storage")},
        },
        base_dir=tmp_path,
        origin="test",
    )


def test_an_include_naming_no_captured_table_is_refused_at_load(harness: SyncHarness) -> None:
    tmp_path = harness.db.parent
    good = _config(tmp_path, harness.db, ["dbo.orders", "DBO.CUST*"])
    assert {t.name for t in load_source(good.sources[0], tmp_path).tables} == {
        "orders",
        "customers",
    }
    bad = _config(tmp_path, harness.db, ["dbo.orders", "dbo.ordres", "sales.*"])
    with pytest.raises(ConfigError) as caught:
        load_source(bad.sources[0], tmp_path)
    message = str(caught.value)
    assert "['dbo.ordres', 'sales.*'] match no table with change data capture" in message
    assert "dbo.orders" in message and "sp_cdc_enable_table" in message


def test_a_keyless_table_without_snapshot_isolation_is_refused(harness: SyncHarness) -> None:
    conn = harness.source.connect()
    conn.cursor().execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION OFF")
    conn.close()
    keyless = next(t for t in harness.source.tables if not t.instance.key_columns)
    text = _run(harness, SNAPSHOT_PARTITION)
    assert f"Table {keyless.qualified_name} has no primary key or unique index" in text
    assert "ALLOW_SNAPSHOT_ISOLATION ON" in text
    assert not harness.source.store.is_published(keyless.change_log_key.path, SNAPSHOT_PARTITION)


def test_a_dropped_capture_instance_holds_back_its_table_only(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CDC disabled on one table: its range writes nothing, its check and the run's failure say
    why and what to do, its mirror stays where it was; the other tables commit the range, and
    the next ranges go on without it (docs/design.md section 8)."""
    # the table behind waits for its retry all through the test: on a slow machine the steps
    # after the failed run took longer than the 30 s pause, and the tick retried it first
    monkeypatch.setattr(retry_waits, "retry_pause", lambda source: 3600.0)
    harness.sync()
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    harness.sync()
    before = harness.assert_mirrors_equal_source()
    gone = harness.source.tables[0]
    others = [t for t in harness.source.tables if t != gone]
    for _ in range(10):
        harness.workload.step()
    conn = harness.source.connect()
    cdc_admin.disable_table(conn, gone.schema, gone.name, "all")
    conn.close()
    for _ in range(10):
        harness.workload.step()
    harness.capture()
    request = harness.tick().run_requests[0]
    result = harness.execute(request)
    assert not result.success
    text = failure_text(result)
    assert f"1 of {len(harness.source.tables)} mirrors left where they were" in text, text
    assert gone.qualified_name in text and not any(t.qualified_name in text for t in others)
    coverage = {
        e.asset_key: e for e in result.get_asset_check_evaluations() if e.check_name == "coverage"
    }
    assert not coverage[gone.change_log_key].passed
    why = coverage[gone.change_log_key].description or ""
    assert f"{gone.qualified_name}: no capture instance covers LSN" in why, why
    assert "sp_cdc_help_change_data_capture" in why
    assert all(coverage[t.change_log_key].passed for t in others)
    assert not harness.source.store.is_published(gone.change_log_key.path, request.partition_key)
    # Dagster records the partition as materialized with nothing written (it skips a step
    # whose input is missing, so the mirrors could not otherwise run): the metadata says so
    event = next(
        e for e in result.get_asset_materialization_events() if e.asset_key == gone.change_log_key
    )
    metadata = event.materialization.metadata
    assert metadata["written"].value is False
    assert "no capture instance covers LSN" in str(metadata["not_written_because"].value)
    assert mirror_lsn(harness.source, gone) == before
    hi = LsnRange.parse_key(request.partition_key).hi
    assert harness.assert_mirrors_equal_source(others) == hi

    # the others keep syncing: the next range leaves the table behind out
    for _ in range(10):
        harness.workload.step()
    harness.capture()
    data = harness.tick()
    assert len(data.run_requests) == 1, data.skip_message
    nxt = data.run_requests[0]
    assert nxt.partition_key != request.partition_key
    assert gone.change_log_key not in (nxt.asset_selection or [])
    result = harness.execute(nxt)
    assert result.success, failure_text(result)
    assert harness.assert_mirrors_equal_source(others) == LsnRange.parse_key(nxt.partition_key).hi
    assert mirror_lsn(harness.source, gone) == before


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
