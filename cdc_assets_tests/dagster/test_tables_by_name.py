"""The change logs, mirrors and histories by name in Spark SQL (:mod:`cdc_assets.dagster.sync.
table_names`), kept in step as tables come, go and are re-snapshotted: found by name after the
first snapshot, a table newly captured, a table no longer captured and a re-snapshot with a new
column, each with the source's column names and types (``line no``, a ``time`` as a time)
whatever the stored form, and the rows of the table stored under its path."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from dagster import DagsterInstance
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from cdc_assets.sqlserver import cdc_admin
from cdc_assets.workload import DEMO_TABLES, table_by_name
from cdc_assets_tests.dagster.conftest import SyncHarness, make_harness

TABLES = tuple(table_by_name(DEMO_TABLES, n) for n in ("dbo.orders", "dbo.order lines"))


def _names(spark: SparkSession) -> set[str]:
    return {r["viewName"] for r in spark.sql("SHOW VIEWS IN cdc_shop").collect()}


def _rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def _assert_by_name_equals_stored(harness: SyncHarness, name: str, key_path: list[str]) -> None:
    by_name = harness.spark.table(f"cdc_shop.{name}")
    stored = harness.source.store.read(harness.spark, key_path, None)  # decoded by the store
    assert by_name.schema.names == stored.schema.names, name
    assert [f.dataType for f in by_name.schema] == [f.dataType for f in stored.schema], name
    assert _rows(by_name) == _rows(stored) and by_name.count() > 0, name


def test_tables_are_found_by_name_after_a_snapshot_a_new_table_and_a_resnapshot(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(tmp_path, spark, instance, rows=8, tables=TABLES)
    harness.sync()  # the snapshot run
    harness.next_range()  # the range that builds the mirrors
    lines = next(t for t in harness.source.tables if t.name == "order lines")
    mirror = f"dbo_{lines.mirror_key.path[-1]}"
    assert _names(spark) >= {"dbo_orders_changes", "dbo_orders_mirror", mirror}
    # the source's names and types: `line no`, `unit price`, a time as a time
    columns = {f.name: f.dataType for f in spark.table(f"cdc_shop.{mirror}").schema}
    assert {"line no", "unit price"} <= set(columns), columns
    assert columns["line no"] == T.ShortType()
    orders = {f.name: f.dataType for f in spark.table("cdc_shop.dbo_orders_mirror").schema}
    assert isinstance(orders["pickup_time"], T.TimeType), orders  # as the store reads it
    assert not any(name.startswith("line_x20") for name in columns)
    _assert_by_name_equals_stored(harness, mirror, list(lines.mirror_key.path))
    _assert_by_name_equals_stored(
        harness, "dbo_orders_mirror", ["mirror", "shop", "dbo", "orders_mirror"]
    )
    # a change log by name: its change rows, no properties rows or column
    changes = spark.table("cdc_shop.dbo_orders_changes")
    assert "_cdc_properties" not in changes.columns
    stored = harness.source.store.location(["cdc", "shop", "dbo", "orders_changes"])
    rows = spark.read.format("delta").load(stored).where("_cdc_properties IS NULL").count()
    assert changes.count() == rows >= 8, "the snapshot's and the range's rows, nothing else"

    # A table comes (captured), another goes (no longer captured): a snapshot run of the new
    # one registers it and drops the names of the one gone.
    conn = harness.source.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            "CREATE TABLE [dbo].[notes] ([id] int NOT NULL PRIMARY KEY, [note text] "
            "nvarchar(40) NULL, [due] time(0) NULL)"
        )
        cursor.execute("INSERT INTO [dbo].[notes] VALUES (1, N'call back', '10:30:00')")
        cdc_admin.enable_table(conn, "dbo", "notes", supports_net_changes=True)
        cdc_admin.disable_table(conn, "dbo", "orders", "dbo_orders")
    finally:
        conn.close()
    harness.capture()
    harness.reload()
    harness.sync()  # the new table's snapshot
    harness.write("INSERT INTO [dbo].[notes] VALUES (3, N'later', NULL)")
    harness.next_range()  # builds its mirror
    names = _names(spark)
    assert {"dbo_notes_changes", "dbo_notes_mirror", mirror} <= names, names
    assert not {"dbo_orders_changes", "dbo_orders_mirror"} & names, names
    notes = spark.table("cdc_shop.dbo_notes_mirror")
    assert notes.schema.names == ["id", "note text", "due"]
    assert sorted(tuple(r) for r in notes.collect()) == [
        (1, "call back", dt.time(10, 30)),
        (3, "later", None),
    ]

    # A re-snapshot with a new column (a schema change and a new capture instance): the name
    # shows the column, with its type.
    conn = harness.source.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("ALTER TABLE [dbo].[notes] ADD [done at] time(2) NULL")
        cursor.execute("UPDATE [dbo].[notes] SET [done at] = '11:00:00.25'")
        cdc_admin.enable_table(
            conn, "dbo", "notes", capture_instance="dbo_notes_v2", supports_net_changes=True
        )
        harness.capture()
        cursor.execute("INSERT INTO [dbo].[notes] VALUES (2, N'write', NULL, '12:00:00')")
    finally:
        conn.close()
    harness.capture()
    (request,) = harness.tick().run_requests
    # the range refused for notes (schema change): it waits for its re-snapshot, and the run
    # does not fail for it
    assert harness.execute(request).success
    harness.sync()  # its re-snapshot, then the range again
    harness.write("UPDATE [dbo].[notes] SET [note text] = N'done' WHERE [id] = 3")
    harness.next_range()  # the mirror rebuilt from the new snapshot
    notes = spark.table("cdc_shop.dbo_notes_mirror")
    assert isinstance({f.name: f.dataType for f in notes.schema}["done at"], T.TimeType)
    _assert_by_name_equals_stored(
        harness, "dbo_notes_mirror", ["mirror", "shop", "dbo", "notes_mirror"]
    )
    assert sorted(tuple(r) for r in notes.select("id", "done at").collect()) == [
        (1, dt.time(11, 0, 0, 250000)),
        (2, dt.time(12, 0)),
        (3, dt.time(11, 0, 0, 250000)),
    ]
