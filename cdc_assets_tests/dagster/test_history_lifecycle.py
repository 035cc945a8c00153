"""Histories share the sync's lifecycle: range retirement waits for a history that is behind,
a history behind the retired ranges carries on (rebuilt on its mirror, no re-snapshot), a new
capture instance with a column added and one dropped carries a history on, quiet ranges move
and show on a history, and its checks pass on a healthy sync and fail, saying what to do, on a
broken interval or a count that differs from the source."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, DagsterInstance
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from cdc_assets import emulator
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.chain import range_partitions, retired_through
from cdc_assets.dagster.sync.change_log_state import snapshot_info
from cdc_assets.dagster.sync.history_plan import history_position
from cdc_assets.dagster.sync.names import health_job_name, partitions_name
from cdc_assets.dagster.sync.sync_state import SourceSync
from cdc_assets.lsn import Lsn
from cdc_assets.spark import history_driver
from cdc_assets.spark.history_store import IS_CURRENT, VALIDITY_COLUMNS
from cdc_assets.sqlserver import cdc_admin, discover
from cdc_assets.sqlserver.lsn_queries import commit_time_at_or_before
from cdc_assets_tests.dagster.conftest import (
    QUIET,
    SOURCE,
    SyncHarness,
    assert_succeeded,
    failure_text,
    make_harness,
)
from cdc_assets_tests.dagster.test_history import (
    TABLES,
    as_rows,
    assert_history_equals_change_table,
    stored_versions,
    with_history,
)
from cdc_assets_tests.support.history_replay import (
    cut_at,
    read_change_table,
    replay_across,
    replay_versions,
)

ACCOUNTS, ORDER_LINES, EVENTS = TABLES  # keyed, keyed on a column Delta stores escaped, keyless


def _table(harness: SyncHarness, name: str) -> Any:
    return next(t for t in harness.source.tables if t.name == name)


def _retired(harness: SyncHarness) -> Lsn | None:
    return retired_through(harness.instance, partitions_name(SOURCE))


def _ranges(harness: SyncHarness) -> list[Any]:
    return range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))


def test_retirement_waits_for_a_history_behind_and_one_behind_retention_carries_on(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``retain_ranges: 1``. While the accounts' history fails and waits for its retry, no range
    is retired and the runs go on without it (the accounts' change log and mirror too); once it
    may run again, a catch-up run brings it to the chain's end, equal to its replayed versions,
    and retirement resumes. A
    history configured after ranges were retired (the events', keyless) is built on its
    mirror's rows at the mirror's LSN instead of failing: no re-snapshot, its versions from
    there on equal the replay."""
    harness = make_harness(
        tmp_path, spark, instance, rows=8, tables=(ACCOUNTS, EVENTS), retain_ranges=1
    )
    with_history(harness, include=("dbo.accounts",))
    harness.sync()  # the snapshots
    for _ in range(3):  # the third range retires the first
        harness.next_range()
    accounts, events = _table(harness, "accounts"), _table(harness, "events")
    retired = _retired(harness)
    assert retired is not None, "retain_ranges: 1 retires ranges while everything keeps up"

    # the accounts' history fails; its table waits an hour before it is tried again
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 3600.0)
    real_apply = history_driver.apply

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected: the history cannot be written")

    monkeypatch.setattr(history_driver, "apply", failing)
    harness.write("INSERT INTO dbo.accounts (id, name, qty) VALUES (5001, N'new', 1)")
    harness.write("INSERT INTO dbo.events (event_id, kind, qty) VALUES (900, 'new', 1)")
    (request,) = harness.tick().run_requests
    result = harness.execute(request)
    assert not result.success
    assert "injected: the history cannot be written" in failure_text(result)
    behind = history_position(harness.source, accounts)
    assert behind is not None
    retired = _retired(harness)  # (that range's tick retired one more: nothing was behind)
    for n in range(3):  # the tables keep syncing, the history waits; nothing is retired
        harness.write(f"INSERT INTO dbo.events (event_id, kind, qty) VALUES ({901 + n}, 'x', {n})")
        if n == 1:
            harness.write("UPDATE dbo.accounts SET qty = 42 WHERE id = 5001")
        (request,) = harness.tick().run_requests
        selected = set(request.asset_selection or ())
        assert (accounts.change_log_key in selected) == (n == 1)
        assert accounts.history_key not in selected, "a history waiting after a failure ran"
        assert_succeeded(harness.execute(request))
    assert _retired(harness) == retired, "a range the history needs was retired"
    assert _ranges(harness)[0].lo <= behind.lsn
    assert history_position(harness.source, accounts) == behind
    harness.assert_mirrors_equal_source()  # the accounts' mirror went on

    # it may run again: a catch-up run brings the history to the chain's end
    monkeypatch.setattr(history_driver, "apply", real_apply)
    monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
    harness.sync()
    end = max(r.hi for r in _ranges(harness))
    position = history_position(harness.source, accounts)
    assert position is not None and position.lsn == end
    assert_history_equals_change_table(harness, accounts)
    harness.next_range()
    later = _retired(harness)
    assert later is not None and later > retired, "retirement resumes once the history is level"

    # the events' history, configured now: the ranges since its snapshot are retired
    snapshot = snapshot_info(harness.source, events)
    assert snapshot is not None and snapshot.replay_from < later
    with_history(harness, include=("dbo.*",))
    harness.write("DELETE FROM dbo.events WHERE event_id = 900")
    harness.sync()
    for _ in range(2):
        harness.next_range()
    assert snapshot_info(harness.source, events) == snapshot, "no re-snapshot"
    built = history_position(harness.source, events)
    assert built is not None
    found = stored_versions(harness, events)
    starts = sorted({row[3] for row in found})
    rebuilt_at = Lsn.from_bytes(starts[0])  # every version the rebuild opened starts there
    assert rebuilt_at > later
    conn = harness.source.connect()
    try:
        changes, times = read_change_table(conn, events.instance.name)
        at_time = commit_time_at_or_before(conn, rebuilt_at)
    finally:
        conn.close()
    replayed = replay_versions(changes, times, list(events.instance.column_names), [])
    assert found == as_rows(cut_at(replayed, rebuilt_at, at_time))
    harness.assert_mirrors_equal_source()


def test_a_new_capture_instance_with_a_column_added_and_one_dropped_carries_the_history_on(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """``ALTER TABLE`` adds ``note`` and drops ``name``, a second capture instance follows: the
    table is re-snapshotted and its history keeps every version before, gains ``note`` (null in
    the versions before), keeps ``name`` (null in those after), and equals the versions replayed
    from both change tables (the first up to the new snapshot, where the rows that differ close
    and open again, the second after)."""
    harness = make_harness(tmp_path, spark, instance, rows=6, tables=(ACCOUNTS,))
    with_history(harness, include=("*",))
    harness.sync()
    harness.next_range()
    accounts = harness.source.tables[0]
    first = accounts.instance
    before = stored_versions(harness, accounts)
    applied = history_position(harness.source, accounts)  # the history's end before the change
    assert applied is not None
    started = Lsn.from_bytes(min(row[3] for row in before))  # the first snapshot's LSN
    conn = harness.source.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("ALTER TABLE [dbo].[accounts] ADD [note] nvarchar(20) NULL")
        cursor.execute("UPDATE [dbo].[accounts] SET [note] = N'n' + CAST([id] AS nvarchar(10))")
        cursor.execute("ALTER TABLE [dbo].[accounts] DROP COLUMN [name]")
        cdc_admin.enable_table(
            conn, "dbo", "accounts", capture_instance="dbo_accounts_v2", supports_net_changes=True
        )
        harness.capture()
        cursor.execute("UPDATE [dbo].[accounts] SET [qty] = 5 WHERE [id] = 2")
    finally:
        conn.close()
    harness.capture()
    (request,) = harness.tick().run_requests
    # the range reaching the new instance is refused for it: the table waits for its
    # re-snapshot, and the run does not fail for it
    assert harness.execute(request).success
    harness.sync()  # the re-snapshot with the new instance, then the range again
    harness.write("UPDATE [dbo].[accounts] SET [qty] = 6, [note] = N'x' WHERE [id] = 3")
    harness.write("DELETE FROM [dbo].[accounts] WHERE [id] = 4")
    harness.sync()
    snapshot = snapshot_info(harness.source, accounts)
    assert snapshot is not None
    conn = harness.source.connect()
    try:
        second = discover(conn)[("dbo", "accounts")].current_instance
        assert second is not None and second.name == "dbo_accounts_v2"
        changes1, times = read_change_table(conn, first.name)
        changes2, _ = read_change_table(conn, second.name)
        started_at = commit_time_at_or_before(conn, started)
        switched_at = commit_time_at_or_before(conn, snapshot.snapshot_lsn)
    finally:
        conn.close()
    columns = ["id", "name", "qty", "note"]
    history_columns = [*columns, *VALIDITY_COLUMNS]
    stored = harness.source.store.read(spark, accounts.history_key.path, None)
    assert set(stored.columns) == set(history_columns)
    found = Counter(
        tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
        for r in stored.select(*[f"`{c}`" for c in history_columns]).collect()
    )
    # the versions closed before the schema change are kept as they were, note null
    kept = {(*r[:3], None, *r[3:]) for r in before if r[-1] is False}
    assert kept and kept <= set(found), "a version from before the schema change is gone"
    state = {  # the table at the new snapshot, as its change log's snapshot partition holds it
        (row["id"],): (row["id"], None, row["qty"], row["note"])
        for row in harness.source.store.read(spark, accounts.change_log_key.path, "snapshot")
        .where(F.col("id").isNotNull())
        .collect()
    }
    expected = as_rows(
        replay_across(
            (changes1, changes2),
            times,
            columns,
            ["id"],
            start=(started, started_at),
            until=applied.lsn,
            switch=(snapshot.snapshot_lsn, switched_at, state),
        )
    )
    assert found == expected, (
        f"only in the history {list((found - expected).items())[:3]}; "
        f"only replayed {list((expected - found).items())[:3]}"
    )
    assert all(r[1] is None for r in found if r[4] >= snapshot.snapshot_lsn.raw)  # name: null
    harness.reload()  # the table with its new capture instance's columns
    harness.assert_mirrors_equal_source()


def test_history_checks_and_quiet_ranges(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    """A range in which only one table changes moves the other's history in the sync state:
    its range shows, quiet, with at_chain_end passed. The health job's reconcile and
    interval_integrity pass on both histories; a second current version of a key fails the
    interval check, a current version deleted outside the sync fails reconcile, each saying
    what to do."""
    harness = make_harness(
        tmp_path, spark, instance, rows=6, tables=(ACCOUNTS, ORDER_LINES, EVENTS)
    )
    with_history(harness, include=("*",))
    harness.sync()
    harness.next_range()  # the mirrors and histories built
    harness.write("INSERT INTO dbo.accounts (id, name, qty) VALUES (5001, N'new', 3)")
    (request,) = harness.tick().run_requests
    result = harness.execute(request)
    assert_succeeded(result)
    accounts, events = _table(harness, "accounts"), _table(harness, "events")
    quiet = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == events.history_key and e.partition == request.partition_key
    ]
    assert quiet and quiet[0].materialization.metadata["quiet"].value is True
    at_end = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key in (accounts.history_key, events.history_key)
        and e.check_name == "at_chain_end"
    ]
    assert {e.asset_key for e in at_end} == {accounts.history_key, events.history_key}
    assert all(e.passed for e in at_end), [e.description for e in at_end]
    row = SourceSync.load(harness.source)[events]
    assert row.history_at == row.mirror_at and row.history_commit is not None
    assert row.history_at > row.history_commit  # moved by the quiet range, no commit

    lines = _table(harness, "order lines")
    checks = {
        AssetCheckKey(t.history_key, name)
        for t in (accounts, lines, events)
        for name in ("reconcile", "interval_integrity")
    }
    job = harness.defs.resolve_job_def(health_job_name(SOURCE))  # they run in the health job
    health = job.get_subset(asset_check_selection=checks)

    def run_checks() -> Any:
        with emulator.CaptureAgent(harness.db):  # reconcile waits for capture to pass its count
            return health.execute_in_process(instance=harness.instance, run_config=QUIET)

    healthy = run_checks()
    assert healthy.success, failure_text(healthy)
    results = {(e.asset_key, e.check_name): e for e in healthy.get_asset_check_evaluations()}
    assert len(results) == 6 and all(e.passed for e in results.values()), [
        e.description for e in results.values() if not e.passed
    ]

    # a second current version of a key, written outside the sync
    uri = harness.source.store.location(accounts.history_key.path)
    history = spark.read.format("delta").load(uri)
    extra = history.where((F.col("id") == 5001) & F.col(IS_CURRENT))
    extra.write.format("delta").mode("append").save(uri)
    broken = run_checks()
    found = {(e.asset_key, e.check_name): e for e in broken.get_asset_check_evaluations()}
    interval = found[(accounts.history_key, "interval_integrity")]
    assert not interval.passed
    assert "two versions whose intervals overlap" in (interval.description or "")
    assert "delete its Delta table" in (interval.description or "")
    assert not found[(accounts.history_key, "reconcile")].passed  # one current version too many
    assert found[(events.history_key, "interval_integrity")].passed

    # a keyless mirror's row deleted outside the sync (a commit with no position): the history
    # is compared with the mirror's version that its position commit made, at the history's LSN
    mirror_uri = harness.source.store.location(events.mirror_key.path)
    (last,) = spark.read.format("delta").load(mirror_uri).agg(F.max("event_id")).first() or (None,)
    spark.sql(f"DELETE FROM delta.`{mirror_uri}` WHERE event_id = {last}")
    moved = run_checks()
    found = {(e.asset_key, e.check_name): e for e in moved.get_asset_check_evaluations()}
    assert found[(events.history_key, "interval_integrity")].passed

    # a keyless row's current version deleted outside the sync
    events_uri = harness.source.store.location(events.history_key.path)
    current = spark.read.format("delta").load(events_uri).where(F.col(IS_CURRENT))
    (first,) = current.agg(F.min("event_id")).first() or (None,)
    spark.sql(f"DELETE FROM delta.`{events_uri}` WHERE {IS_CURRENT} AND event_id = {first}")
    broken = run_checks()
    found = {(e.asset_key, e.check_name): e for e in broken.get_asset_check_evaluations()}
    reconcile = found[(events.history_key, "reconcile")]
    assert not reconcile.passed and "Re-snapshot the table" in (reconcile.description or "")
    assert not found[(events.history_key, "interval_integrity")].passed  # the mirror's copies
