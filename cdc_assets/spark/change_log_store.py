"""The change-log store: what one partition of a table's change log commits, as typed writes.

A write reads its rows from the source (in the driver when they are few, else by Spark), holds
them, computes the partition's properties itself and commits rows and properties at once
(:class:`.asset_store.AssetStore`): a snapshot's from the rows it read (replay LSN, snapshot LSN,
rows) beside the identity its caller decided before the write; a range's from the source after
the read (:func:`cdc_assets.sqlserver.range_facts.range_facts`: counts, commit times, the
coverage that proves cleanup removed none of the rows). Nothing above this layer is called
during a write; a big snapshot reports each batch committed (``on_commit``) and nothing else.

Each write's ``write(spark, store, key_path, partition)`` is what the IO manager calls
(:class:`.store_writes.StoreWrite`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import ConnectionSettings
from cdc_assets.sqlserver.catalog import CaptureInstance
from cdc_assets.sqlserver.dbapi import DbapiConnection
from cdc_assets.sqlserver.range_facts import RangeTimes, range_facts

from . import sqlserver_source
from .asset_store import AssetStore
from .change_log_properties import range_properties
from .commit_metadata import Published
from .driver_writes import DRIVER_WRITE_ROWS, RowsInDriver
from .snapshot_chunks import BatchCommitted, SnapshotProgress, write_in_chunks


@dataclass(frozen=True)
class SnapshotWrite:
    """A table's snapshot committed at once (one key range): ``identity`` is what every commit
    of it says (kind, capture instance, mode, reason, rows expected ...), the rest is read."""

    plan: sqlserver_source.ReadPlan
    instance: CaptureInstance
    identity: Mapping[str, Any]

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        # A small table is read here, in the driver: a Spark task and the jobs that read its
        # rows back (the summary, the size check) cost more than its rows (a thousand tables).
        # The properties come from the rows read, markers included (the snapshot's bounds);
        # the markers themselves are not stored: a change log's rows are the table's rows and
        # its changes, and its properties rows (README: "filter _cdc_properties IS NULL").
        plan = self.plan
        # the ranges' columns too: a range without changes is then a properties row alone
        later = sqlserver_source.empty_change_frame(spark, self.instance)
        if (plan.rows or 0) <= DRIVER_WRITE_ROWS:
            read = sqlserver_source.read_snapshot_in_driver(plan)
            properties = self._properties(read)
            rows = RowsInDriver(
                sqlserver_source.snapshot_frame_schema(plan),
                lambda: sqlserver_source.snapshot_rows_in_driver(read),
            )
            return store.write_in_driver(
                spark, rows, key_path, partition, lambda _: properties, later_columns=later
            )
        # read once (a second read of the source could differ: a fuzzy snapshot), then written
        held = sqlserver_source.load_snapshot(spark, plan).localCheckpoint(eager=True)
        try:
            properties = self._properties(held)
            return store.write(
                spark,
                sqlserver_source.snapshot_rows(held),
                key_path,
                partition,
                lambda _: properties,
                later_columns=later,
                rows=plan.rows,
                read_once=False,
            )
        finally:
            held.unpersist()

    def _properties(self, read: DataFrame | pa.Table) -> dict[str, Any]:
        replay_from, snapshot_lsn, rows = sqlserver_source.snapshot_summary(read)
        return {
            **self.identity,
            "replay_from": replay_from.hex,
            "snapshot_lsn": snapshot_lsn.hex,
            "rows": rows,
            "taken_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }


@dataclass(frozen=True)
class ChunkedSnapshotWrite:
    """A big table's snapshot committed a batch of key ranges at a time, resumable
    (:mod:`.snapshot_chunks`); ``resume``: the unfinished snapshot it continues."""

    plan: sqlserver_source.ReadPlan
    instance: CaptureInstance
    identity: Mapping[str, Any]
    write_id: str
    resume: SnapshotProgress | None
    chunks_per_commit: int
    on_commit: Callable[[BatchCommitted], None] = lambda _: None  # progress, after each commit

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        assert partition is not None, "a snapshot is a change-log partition"
        return write_in_chunks(
            spark,
            store,
            key_path,
            partition,
            self.plan,
            identity=self.identity,
            write_id=self.write_id,
            resume=self.resume,
            chunks_per_commit=self.chunks_per_commit,
            later_columns=sqlserver_source.empty_change_frame(spark, self.instance),
            on_commit=self.on_commit,
        )


@dataclass(frozen=True)
class RangeWrite:
    """The change rows of ``table`` (schema, name) in ``lsn_range``: those of ``read_range``
    (the part above the table's snapshot; None: the snapshot covers it all). ``change_rows``:
    how many there are, when counted: none, and nothing is read and no Spark job runs; a few,
    and they are read in the driver. ``conn`` asks the source for the range's facts after the
    read (:func:`~cdc_assets.sqlserver.range_facts.range_facts`); ``times`` are the run's."""

    settings: ConnectionSettings
    conn: DbapiConnection
    instance: CaptureInstance
    table: tuple[str, str]
    lsn_range: LsnRange
    read_range: LsnRange | None
    times: RangeTimes
    change_rows: int | None = None

    @property
    def empty(self) -> bool:
        return self.read_range is None or self.change_rows == 0

    def write(
        self, spark: SparkSession, store: AssetStore, key_path: Sequence[str], partition: str | None
    ) -> Published:
        instance, read_range = self.instance, self.read_range
        if self.empty:
            df = sqlserver_source.empty_change_frame(spark, instance)
            return store.write(spark, df, key_path, partition, self._properties, empty=True)
        assert read_range is not None
        if self.change_rows is not None and self.change_rows <= DRIVER_WRITE_ROWS:
            rows = RowsInDriver(
                sqlserver_source.change_frame_schema(instance),
                lambda: sqlserver_source.read_changes_in_driver(
                    self.settings, instance, read_range
                ),
            )
            return store.write_in_driver(spark, rows, key_path, partition, self._properties)
        df = sqlserver_source.read_change_range(spark, self.settings, instance, read_range)
        return store.write(spark, df, key_path, partition, self._properties)

    def _properties(self, _read: DataFrame | pa.Table) -> dict[str, Any]:
        # asked of the source once the rows are read: the coverage proves them complete
        return range_properties(
            range_facts(
                self.conn,
                self.instance,
                self.table,
                self.lsn_range,
                self.read_range,
                self.times,
                empty=self.empty,
            )
        )
