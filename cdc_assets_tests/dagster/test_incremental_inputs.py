"""Incremental inputs (``cdc_assets/read: changes``): a downstream asset reads a mirror's changes
since the version it consumed last, and the incremental ``daily_orders`` stays equal to a full
recompute of the mirror through random workloads, a run that fails half way and is executed
again, a compaction, a vacuumed version and a re-snapshot of the source table."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetSelection,
    DagsterInstance,
    ExecuteInProcessResult,
    RunRequest,
    materialize,
)
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.examples import daily_orders_key
from cdc_assets.dagster.mirror import mirror_lsn
from cdc_assets.dagster.sync.incremental_inputs import CONSUMED
from cdc_assets.dagster.sync.names import RESNAPSHOT_TAG, SNAPSHOT_PARTITION
from cdc_assets.spark import driver_feed_reads, replace_rows, table_maintenance
from cdc_assets.spark.change_feed import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    LSN_COLUMN,
    FeedRead,
    changes_since,
)

from .conftest import QUIET, SyncHarness, assert_succeeded, make_harness


def _orders(h: SyncHarness) -> Any:
    return next(t for t in h.source.tables if t.name == "orders")


def _run_daily(h: SyncHarness) -> ExecuteInProcessResult:
    return materialize(
        list(h.defs.assets or []),
        instance=h.instance,
        resources=dict(h.defs.resources or {}),
        selection=AssetSelection.assets(daily_orders_key("shop")),
        run_config=QUIET,
        raise_on_error=False,
    )


def _consumed(h: SyncHarness) -> FeedRead:
    event = h.instance.get_latest_materialization_event(daily_orders_key("shop"))
    assert event is not None and event.asset_materialization is not None
    recorded = event.asset_materialization.metadata[CONSUMED].value
    read = FeedRead.from_metadata(recorded[_orders(h).mirror_key.to_user_string()])
    assert read is not None
    return read


def _log_lines(h: SyncHarness, result: ExecuteInProcessResult) -> list[str]:
    """The lines the run logged about the mirror of orders."""
    entries = h.instance.all_logs(result.run_id)
    return [e.user_message for e in entries if "mirror/shop/dbo/orders" in e.user_message]


def _assert_equals_full_recompute(h: SyncHarness) -> None:
    """The stored aggregate (read by delta-rs) is the aggregate of the source table computed
    whole (in Python, from the emulator)."""
    conn = emulator.connect(str(h.db), autocommit=True)
    try:
        rows = conn.execute("SELECT order_id, customer_id, ordered_at, total FROM dbo.orders")
        orders = rows.fetchall()
    finally:
        conn.close()
    want: dict[dt.date, tuple[int, int, Decimal]] = {}
    customers: dict[dt.date, set[int]] = {}
    for _, customer, at, total in orders:
        n, _, revenue = want.get(at.date(), (0, 0, Decimal(0)))
        customers.setdefault(at.date(), set()).add(customer)
        want[at.date()] = (n + 1, len(customers[at.date()]), revenue + total)
    uri = h.source.store.location(daily_orders_key("shop").path)
    written = DeltaTable(uri).to_pyarrow_table().to_pylist()
    got = {r["order_date"]: (r["orders"], r["customers"], r["revenue"]) for r in written}
    assert got == want and got, {
        d: (got.get(d), want.get(d)) for d in set(got) | set(want) if got.get(d) != want.get(d)
    }


def _full_run(h: SyncHarness, why: str) -> None:
    result = _run_daily(h)
    assert_succeeded(result)
    lines = _log_lines(h, result)
    assert any("reading the whole mirror" in line and why in line for line in lines), lines
    assert _consumed(h).after is None
    _assert_equals_full_recompute(h)


def _incremental_run(h: SyncHarness, where: str = "in the driver") -> FeedRead:
    """A run that reads the changes since the last one's; the days they touch recomputed
    ``where`` ("in the driver", "with Spark") when there were any."""
    before = _consumed(h)
    result = _run_daily(h)
    assert_succeeded(result)
    read = _consumed(h)
    assert read.after == before.to, (before, read)
    assert any("reading the changes of versions" in line for line in _log_lines(h, result))
    lines = [e.user_message for e in h.instance.all_logs(result.run_id)]
    recomputed = [line for line in lines if line.startswith("recomputed")]
    assert all(where in line for line in recomputed), recomputed
    _assert_equals_full_recompute(h)
    return read


def test_daily_orders_is_incremental_and_equals_a_full_recompute(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = make_harness(tmp_path, spark, instance, rows=40, seed=5, examples=("daily_orders",))
    h.sync()
    h.next_range(steps=6)  # the first range builds the mirrors
    orders = _orders(h)
    uri = h.source.store.location(orders.mirror_key.path)
    _full_run(h, "first run")

    # random workloads, a range or two between runs
    for round_ in range(2):
        for _ in range(1 + round_ % 2):
            h.next_range(steps=6)
        _incremental_run(h)
    # the same with Spark's reads (a store or changes the driver does not read)
    with monkeypatch.context() as spark_reads:
        spark_reads.setattr(driver_feed_reads, "DRIVER_FEED_BYTES", 0)
        h.next_range(steps=6)
        _incremental_run(h, "with Spark")

    # the feed itself: an update's pre- and post-image with the LSN its version reached
    order_id = h.mirror(orders).orderBy("order_id").first()["order_id"]
    h.write(f"UPDATE dbo.orders SET total = 12.5 WHERE order_id = {order_id}")
    h.sync()
    changes = changes_since(spark, uri, _consumed(h), what="mirror")
    assert not changes.full
    images = changes.rows.where(f"order_id = {order_id}").collect()
    assert sorted(r[CHANGE_TYPE] for r in images) == ["update_postimage", "update_preimage"]
    lsn = mirror_lsn(h.source, orders)
    assert lsn is not None and {r[LSN_COLUMN] for r in images} == {lsn.hex}
    assert changes.to_lsn == lsn.hex and all(r[COMMIT_TIMESTAMP] is not None for r in images)

    # a compaction (no row changes) in between: still a feed, nothing read twice
    spark.sql(f"OPTIMIZE delta.`{uri}`").collect()
    h.next_range(steps=6)
    _incremental_run(h)

    # a run that fails half way (its rows replaced, its materialization never recorded), then
    # executed again: the same changes read again, each once in the result
    h.next_range(steps=8)
    consumed = _consumed(h)
    real = replace_rows.RowsReplaced.write

    def write_then_fail(self: Any, *args: Any, **kwargs: Any) -> Any:
        real(self, *args, **kwargs)
        raise RuntimeError("killed after the commit")

    monkeypatch.setattr(replace_rows.RowsReplaced, "write", write_then_fail)
    assert not _run_daily(h).success
    assert _consumed(h) == consumed  # nothing recorded
    monkeypatch.setattr(replace_rows.RowsReplaced, "write", real)
    again = _incremental_run(h)
    assert again.after == consumed.to

    # a vacuumed version: the files of the versions since the last run may be gone
    h.next_range(steps=6)
    table_maintenance.vacuum(spark, uri, 0)
    _full_run(h, "VACUUM")

    # a re-snapshot of the source table rebuilds the mirror: the whole mirror again
    h.next_range(steps=4)
    request = RunRequest(
        partition_key=SNAPSHOT_PARTITION,
        asset_selection=[orders.change_log_key],
        tags={RESNAPSHOT_TAG: "test"},
    )
    assert_succeeded(h.execute(request))
    h.workload.step()
    h.capture()
    h.sync()
    _full_run(h, "rebuilt")
    h.next_range(steps=6)
    _incremental_run(h)
