"""A change log read outside Spark as the README says (DuckDB, ``WHERE _cdc_properties IS NULL``)
holds the table's rows and its changes, and nothing else.

A snapshot is read with one marker row per key range (every table column NULL, the range's
watermarks set: ``sqlserver_source``); the snapshot's properties are computed from them, and
the rows stored are the table's. Each way a snapshot is committed is read back: in the driver
(a small table), by Spark in one commit, and by Spark a batch of key ranges per commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorSettings
from cdc_assets.spark import change_log_store, sqlserver_source
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.change_log_store import ChunkedSnapshotWrite, SnapshotWrite
from cdc_assets.sqlserver import cdc_admin, discover
from cdc_assets_tests.support.outside_spark import _duckdb_with_delta

ROOT = Path(__file__).resolve().parents[2]
ROWS = 30
COLUMNS = ("id", "name", "qty")
# The README's read of a change log (section "Storage: Delta Lake").
README_FILTER = "_cdc_properties IS NULL"


def _source(db: Path) -> EmulatorSettings:
    conn = emulator.connect(db, autocommit=True)
    try:
        cdc_admin.enable_database(conn)
        conn.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        conn.execute(
            "CREATE TABLE [dbo].[t] (id int NOT NULL PRIMARY KEY, name nvarchar(20), qty int)"
        )
        for i in range(1, ROWS + 1):
            conn.execute("INSERT INTO [dbo].[t] (id, name, qty) VALUES (?, ?, ?)", i, f"n{i}", i)
        cdc_admin.enable_table(conn, "dbo", "t", supports_net_changes=True)
    finally:
        conn.close()
    while emulator.scan(db) > 0:
        pass
    return EmulatorSettings(path=db)


def _readme_read(path: str) -> list[tuple]:
    names = ", ".join(COLUMNS)
    with _duckdb_with_delta().cursor() as cursor:
        return cursor.execute(
            f"SELECT {names} FROM delta_scan(?) WHERE {README_FILTER} "
            "AND _cdc_partition = 'snapshot'",
            [path],
        ).fetchall()


def test_a_snapshot_read_as_the_readme_says_holds_the_table_rows_only(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert f"`{README_FILTER}`" in (ROOT / "README.md").read_text(encoding="utf-8")
    settings = _source(tmp_path / "source.db")
    conn = emulator.connect(tmp_path / "source.db", autocommit=True)
    try:
        instance = discover(conn)[("dbo", "t")].current_instance
    finally:
        conn.close()
    assert instance is not None
    store = AssetStore(tmp_path / "storage")
    one = sqlserver_source.plan_snapshot(settings, instance, mode="exact")
    chunks = sqlserver_source.plan_snapshot(settings, instance, mode="exact", chunk_rows=10)
    assert len(one.key_ranges) == 1 and len(chunks.key_ranges) == 3
    identity = {"kind": "snapshot"}
    writes = {
        "driver": SnapshotWrite(one, instance, identity),
        "spark": SnapshotWrite(one, instance, identity),
        "chunked": ChunkedSnapshotWrite(
            chunks, instance, identity, write_id="w", resume=None, chunks_per_commit=2
        ),
    }
    for name, write in writes.items():
        with monkeypatch.context() as m:
            if name == "spark":
                m.setattr(change_log_store, "DRIVER_WRITE_ROWS", 0)  # Spark reads and writes
            published = write.write(spark, store, [name], "snapshot")
        assert published.properties["rows"] == ROWS, name
        assert published.properties["snapshot_lsn"] >= published.properties["replay_from"]
        rows = _readme_read(store.location([name]))
        assert (None, None, None) not in rows, f"{name}: a row of NULLs (a chunk's marker)"
        assert sorted(rows) == [(i, f"n{i}", i) for i in range(1, ROWS + 1)], (name, rows)
