"""The real definitions end to end: materialize ``snapshot`` and ranges, tick the sync sensor on a
real instance, block mirrors on failed coverage, and keep mirrors equal to the source."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetCheckKey,
    AssetCheckSeverity,
    AssetKey,
    AssetSelection,
    DagsterEventType,
    DagsterInstance,
    ExecuteInProcessResult,
    RunRequest,
    materialize,
)
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster import mirror_checks
from cdc_assets.dagster.mirror import mirror_lsn, mirror_position, mirror_state
from cdc_assets.dagster.sync import chain_end_check
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.chain_end_check import Patience
from cdc_assets.dagster.sync.metadata import OPERATION_NAMES
from cdc_assets.dagster.sync.names import RESNAPSHOT_TAG, SNAPSHOT_PARTITION, partitions_name
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.lsn import Lsn, LsnRange
from cdc_assets.spark import sqlserver_source
from cdc_assets.sqlserver import cdc_admin, discover, get_max_lsn, get_min_lsn, plan_next_range
from cdc_assets.sqlserver.ranges import RANGE_STATS_QUERY
from cdc_assets.workload import DEMO_TABLES

from .conftest import QUIET, SOURCE, SyncHarness, failure_text, make_harness


def _model_name(table: CapturedTable) -> str:
    return f"{table.schema}.{table.name}"


def _materialized(result, key: AssetKey, partition: str | None = None) -> dict:
    """The metadata of ``key``'s one materialization in ``result`` (of ``partition`` if given:
    the run that first brings a mirror past its snapshot also records its 'snapshot' partition)."""
    events = [
        e
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key == key
        and (partition is None or e.event_specific_data.materialization.partition == partition)
    ]
    assert len(events) == 1, f"{key.to_user_string()} materialized {len(events)} times"
    return events[0].event_specific_data.materialization.metadata


def _record_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements sent to the emulator from now on (in any thread of this process)."""
    sent: list[str] = []
    original = emulator.Cursor.execute

    def recording(cursor: emulator.Cursor, sql: str, *params: Any) -> Any:
        sent.append(sql)
        return original(cursor, sql, *params)

    monkeypatch.setattr(emulator.Cursor, "execute", recording)
    return sent


def _checks(result) -> dict[tuple[str, str], bool]:
    return {
        (e.asset_key.to_user_string(), e.check_name): e.passed
        for e in result.get_asset_check_evaluations()
    }


def test_materialize_snapshot_then_a_range(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``materialize(...)`` of the snapshot partition, then of one range, on a test instance.
    The range's commit times are asked of the source once for the run, not per table."""
    assets = list(harness.defs.assets or [])
    resources = dict(harness.defs.resources or {})
    partitions = partitions_name(SOURCE)
    harness.instance.add_dynamic_partitions(partitions, [SNAPSHOT_PARTITION])
    snap = materialize(
        assets,
        instance=harness.instance,
        resources=resources,
        partition_key=SNAPSHOT_PARTITION,
        run_config=QUIET,
        selection=[t.change_log_key for t in harness.source.tables],
    )
    assert snap.success, failure_text(snap)
    for table in harness.source.tables:
        metadata = _materialized(snap, table.change_log_key)
        assert metadata["dagster/row_count"].value == harness.workload.row_count(_model_name(table))
        assert metadata["snapshot_mode"].value == "exact"
        columns = [c.name for c in metadata["dagster/column_schema"].value.columns]
        assert columns == list(table.instance.column_names)
        assert str(metadata["dagster/uri"].value).startswith(str(harness.source.storage))
    assert all(_checks(snap).values()) and len(_checks(snap)) == 2 * len(harness.source.tables)

    for _ in range(25):
        harness.workload.step()
    harness.capture()
    conn = harness.source.connect()
    try:
        # The chain starts where the earliest snapshot's replay starts.
        start = min(
            harness.source.store.properties(t.change_log_key.path, SNAPSHOT_PARTITION)[
                "replay_from"
            ]
            for t in harness.source.tables
        )
        lsn_range = plan_next_range(conn, Lsn.parse(start), 10_000)
        assert lsn_range is not None
        maximum = get_max_lsn(conn)
    finally:
        conn.close()
    harness.instance.add_dynamic_partitions(partitions, [lsn_range.key])
    sent = _record_queries(monkeypatch)
    ranged = materialize(
        assets,
        instance=harness.instance,
        resources=resources,
        partition_key=lsn_range.key,
        run_config=QUIET,
    )
    assert ranged.success, failure_text(ranged)
    monkeypatch.undo()
    assert lsn_range.hi == maximum
    assert sent.count(RANGE_STATS_QUERY) == 1, "commit times asked per table"
    times = {
        (m["transactions"].value, m["commit_time_range"].value)
        for m in (_materialized(ranged, t.change_log_key) for t in harness.source.tables)
    }
    assert len(times) == 1 and next(iter(times))[0] > 0, times
    total = 0
    for table in harness.source.tables:
        metadata = _materialized(ranged, table.change_log_key)
        assert metadata["lsn_range"].value == f"({lsn_range.lo.hex}, {lsn_range.hi.hex}]"
        total += metadata["dagster/row_count"].value
        # rows per operation (counted by the source) are the stored rows'
        stored = harness.source.store.read(harness.spark, table.change_log_key.path, lsn_range.key)
        by_op = {int(r[0]): r[1] for r in stored.groupBy("`__$operation`").count().collect()}
        for op, name in OPERATION_NAMES.items():
            assert metadata[f"rows_{name}"].value == by_op.get(op, 0), (table, name, by_op)
        mirror = _materialized(ranged, table.mirror_key, lsn_range.key)
        assert mirror["mirror_lsn"].value == lsn_range.hi.hex
        recorded = _materialized(ranged, table.mirror_key, SNAPSHOT_PARTITION)
        assert recorded["applied_by_range"].value == lsn_range.key
        assert mirror["dagster/row_count"].value == harness.workload.row_count(_model_name(table))
    assert total > 0
    assert all(_checks(ranged).values())
    assert harness.assert_mirrors_equal_source() == lsn_range.hi


def test_sensor_ticks_add_one_contiguous_range_each(harness: SyncHarness) -> None:
    """First tick: a snapshot run. Then each tick with new changes adds exactly one range whose
    lo is the previous range's hi; with nothing new it skips; with a run in flight it waits."""
    first = harness.tick()
    assert [r.partition_key for r in first.run_requests] == [SNAPSHOT_PARTITION]
    assert harness.execute(first.run_requests[0]).success

    idle = harness.tick()  # nothing was written since the snapshot
    assert not idle.run_requests and idle.skip_message

    previous: LsnRange | None = None
    for round_ in range(3):
        for _ in range(5 + round_):
            harness.workload.step()
        harness.capture()
        keys_before = set(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))
        data = harness.tick()
        assert len(data.run_requests) == 1, data.skip_message
        added = set(harness.instance.get_dynamic_partitions(partitions_name(SOURCE))) - keys_before
        assert len(added) == 1
        (key,) = added
        assert data.run_requests[0].partition_key == key
        new = LsnRange.parse_key(key)
        if previous is not None:
            assert new.lo == previous.hi, "the chain has a gap or an overlap"
        conn = harness.source.connect()
        try:
            assert new.hi == get_max_lsn(conn)
        finally:
            conn.close()
        assert harness.execute(data.run_requests[0]).success
        previous = new

        # A restarted daemon (no cursor) continues exactly at the end of the chain.
        harness.cursor = None
        assert not harness.tick().run_requests
    assert (
        range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))[-1]
        == previous
    )
    harness.assert_mirrors_equal_source()


def test_failed_coverage_check_holds_back_its_mirror_only(harness: SyncHarness) -> None:
    """Cleanup removed changes of the next range for one table: its coverage check fails,
    nothing is written for it, and its mirror does not move; the other tables' mirrors apply
    the range (one table never holds back the others)."""
    victim, request, result, at_before = _cleanup_next_range(harness)
    lsn_range = LsnRange.parse_key(request.partition_key)
    checks = _checks(result)
    assert checks[(victim.change_log_key.to_user_string(), "coverage")] is False
    failed = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == victim.change_log_key and e.check_name == "coverage"
    )
    assert "Re-snapshot" in (failed.description or "")
    assert not harness.source.store.is_published(victim.change_log_key.path, lsn_range.key)
    moved = {
        e.asset_key
        for e in result.all_events
        if e.event_type == DagsterEventType.ASSET_MATERIALIZATION
        and e.asset_key is not None
        and e.asset_key.path[0] == "mirror"
    }
    assert victim.mirror_key not in moved, "the mirror moved although its coverage check failed"
    assert mirror_lsn(harness.source, victim) == at_before[victim.name]
    # at_chain_end comes from the mirrors step itself, for each mirror of the run, also when the
    # step fails for one: no check step is left unexecuted (the UI would show every mirror red)
    assert not any(k.name == "at_chain_end" for k in request.asset_check_keys or [])
    in_run = {k for k in request.asset_selection or [] if k.path[0] == "mirror"}
    at_end = {
        e.asset_key: e.passed
        for e in result.get_asset_check_evaluations()
        if e.check_name == "at_chain_end" and e.asset_key in in_run
    }
    assert set(at_end) == in_run and len(in_run) > 1, (at_end, in_run)
    assert {k for k, passed in at_end.items() if not passed} == {victim.mirror_key}, at_end
    # ... saying which run failed for which table, why, and when the sensor tries it again
    (behind,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "at_chain_end" and e.asset_key == victim.mirror_key
    ]
    said = behind.description or ""
    assert f"run {result.run_id} ({lsn_range.key}) failed for {victim.qualified_name}" in said
    assert "1 time(s) in a row" in said and "tries it again in" in said, said
    assert "Re-snapshot" in said or "re-snapshotting" in said, said
    state = mirror_state(harness.source, victim)
    assert state is not None and lsn_range.key not in state["applied_ranges"]
    others = [t for t in harness.source.tables if t != victim]
    assert {t.mirror_key for t in others} <= moved
    assert harness.assert_mirrors_equal_source(others) == lsn_range.hi


@pytest.mark.parametrize(
    ("seed", "mode"),
    [(11, "auto"), (12, "fuzzy")],
)
def test_mirrors_equal_source_after_random_concurrent_workloads(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, seed: int, mode: str
) -> None:
    """A random workload (multi-table transactions, key updates, delete + re-insert, rollbacks,
    bursts) writes while the sensor snapshots in small key chunks and syncs in ranges of at most
    8 transactions; afterwards every mirror equals its source table at the mirror's LSN."""
    tables = DEMO_TABLES if mode == "auto" else tuple(t for t in DEMO_TABLES if t.primary_key)
    harness = make_harness(
        tmp_path,
        spark,
        instance,
        seed=seed,
        rows=40,
        tables=tables,
        max_transactions=8,
        snapshot_mode=mode,
        chunk_rows=15,
    )
    # each sync run races a burst of writes
    workload = harness.sync_racing_writes(rounds=3, steps=12, seed=seed + 100)
    assert workload.stats.transactions > 0
    harness.capture()
    harness.sync()
    lsn = harness.assert_mirrors_equal_source()
    harness.assert_mirrors_readable_outside_spark()
    conn = harness.source.connect()
    try:
        assert lsn == get_max_lsn(conn)
    finally:
        conn.close()
    ranges = range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))
    assert len(ranges) >= 2, ranges
    assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))
    snapshots = [
        harness.source.store.properties(t.change_log_key.path, SNAPSHOT_PARTITION)
        for t in harness.source.tables
    ]
    assert {s["mode"] for s in snapshots} == {"exact" if mode == "auto" else "fuzzy"}


def _run_mirror_checks(harness: SyncHarness) -> dict[tuple[str, str], bool]:
    mirrors = [t.mirror_key for t in harness.source.tables]
    with emulator.CaptureAgent(harness.db):  # reconcile waits for capture to pass its count
        result = harness.run_checks(AssetSelection.checks_for_assets(*mirrors))
    return _checks(result)


def test_reconcile_with_capture_not_passing_waits_once_for_the_source(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture not passing the count's LSN (the job reported running, nothing captured) while
    the mirrors are behind it: one wait for the source (not one per table), then every
    ``reconcile`` warns that capture has not passed it."""
    harness.sync()
    harness.next_range()  # the mirrors are built by their first range
    for _ in range(6):  # written, not captured: the count's LSN is past the max LSN
        harness.workload.step()
    waits: list[float] = []
    real_wait = mirror_checks.wait_for_max_lsn

    def wait(conn: Any, target: Lsn, *, timeout_s: float, **kw: Any) -> Lsn:
        waits.append(timeout_s)
        return real_wait(conn, target, timeout_s=timeout_s, **kw)

    monkeypatch.setattr(mirror_checks, "wait_for_max_lsn", wait)
    monkeypatch.setattr(mirror_checks, "CAPTURE_WAIT_SECONDS", 1.0)
    mirrors = [t.mirror_key for t in harness.source.tables]
    result = harness.run_checks(AssetSelection.checks_for_assets(*mirrors))
    reconciled = [e for e in result.get_asset_check_evaluations() if e.check_name == "reconcile"]
    assert len(reconciled) == len(harness.source.tables) > 1
    assert waits == [1.0], [e.description for e in reconciled]
    for evaluation in reconciled:
        assert not evaluation.passed
        assert evaluation.severity == AssetCheckSeverity.WARN
        assert "capture job has not passed" in (evaluation.description or ""), evaluation


def test_reconcile_with_the_capture_job_stopped_says_so_without_waiting(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQL Server Agent reports the capture job stopped while the mirrors are behind the
    count's LSN: no wait can end well, so every ``reconcile`` says at once that the job is
    stopped and how to start it."""
    harness.sync()
    harness.next_range()
    conn = harness.source.connect()
    try:
        cdc_admin.stop_job(conn, "capture")
    finally:
        conn.close()
    harness.capture()
    for _ in range(6):  # written, not captured: the count's LSN is past the max LSN
        harness.workload.step()
    waits: list[float] = []
    monkeypatch.setattr(mirror_checks, "wait_for_max_lsn", lambda *a, **kw: waits.append(1.0))
    mirrors = [t.mirror_key for t in harness.source.tables]
    result = harness.run_checks(AssetSelection.checks_for_assets(*mirrors))
    reconciled = [e for e in result.get_asset_check_evaluations() if e.check_name == "reconcile"]
    assert len(reconciled) == len(harness.source.tables) > 1
    assert waits == []
    for evaluation in reconciled:
        assert not evaluation.passed
        assert evaluation.severity == AssetCheckSeverity.WARN
        assert "capture job is stopped" in (evaluation.description or ""), evaluation
        assert "sp_cdc_start_job" in (evaluation.description or ""), evaluation


def test_reconcile_counts_the_source_at_the_mirror_lsn(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reconcile`` passes while the source keeps changing after the mirror's LSN, and while
    a sync run merges the next range under it, and fails when a mirror lost a row;
    ``at_chain_end`` says whether every range was applied."""
    harness.sync()
    for _ in range(8):
        harness.workload.step()
    harness.capture()
    harness.sync()
    for _ in range(8):  # written and captured, but not synced: the mirrors stay behind
        harness.workload.step()
    harness.capture()
    checks = _run_mirror_checks(harness)
    tables = harness.source.tables
    assert len(checks) == 2 * len(tables)
    assert all(checks.values()), checks

    # A sync run merges while reconcile runs: it found the mirrors' newest commits before the
    # merges landed, and counts the rows of those versions, not of the newer ones.
    store = harness.source.store
    found = {tuple(t.mirror_key.path): store.commit_properties(t.mirror_key.path) for t in tables}
    harness.sync()
    real = type(store).commit_properties
    monkeypatch.setattr(
        type(store),
        "commit_properties",
        lambda self, path: found.get(tuple(path)) or real(self, path),
    )
    checks = _run_mirror_checks(harness)
    assert all(ok for (_, name), ok in checks.items() if name == "reconcile"), checks
    monkeypatch.undo()
    for _ in range(8):  # behind again
        harness.workload.step()
    harness.capture()

    victim = next(t for t in tables if harness.workload.row_count(_model_name(t)) > 0)
    state = mirror_state(harness.source, victim)
    assert state is not None
    damaged = harness.mirror(victim).limit(harness.workload.row_count(_model_name(victim)) - 1)
    harness.source.store.write(
        harness.spark, damaged.localCheckpoint(), victim.mirror_key.path, None, lambda _: state
    )
    checks = _run_mirror_checks(harness)
    assert checks[(victim.mirror_key.to_user_string(), "reconcile")] is False
    assert sum(not ok for ok in checks.values()) == 1

    # A range added, its run not executed: the mirrors are behind the chain now. Just added,
    # the sensor is asking for its run: at_chain_end passes saying so (the sync is on its way)
    (added,) = harness.tick().run_requests
    checks = _run_mirror_checks(harness)
    ends = {k: ok for k, ok in checks.items() if k[1] == "at_chain_end"}
    assert len(ends) == len(tables) and all(ends.values()), checks
    # ... and once the sensor has had longer than it needs to ask for the run, with none
    # asked for, it fails saying which range has no run and what to do
    monkeypatch.setattr(
        chain_end_check, "patience", lambda _source: Patience(ask=0.0, start=0.0, queue=0.0)
    )
    at_end = AssetSelection.checks(*(AssetCheckKey(t.mirror_key, "at_chain_end") for t in tables))
    stuck = harness.run_checks(at_end).get_asset_check_evaluations()
    assert len(stuck) == len(tables) and not any(e.passed for e in stuck), stuck
    for evaluation in stuck:
        text = evaluation.description or ""
        assert f"no run has been asked for range {added.partition_key}" in text, text
        assert "shop_sync_sensor" in text and "dagster-daemon" in text, text


def _cleanup_next_range(
    harness: SyncHarness,
) -> tuple[CapturedTable, RunRequest, ExecuteInProcessResult, dict[str, Lsn | None]]:
    """Sync (the mirrors exist), write, let cleanup remove changes of the next range for one
    table, and run that range: the victim, the request, the failed run, the mirrors' LSNs."""
    harness.sync()  # the snapshot
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    harness.sync()  # a first range: the mirrors exist
    for _ in range(10):
        harness.workload.step()
    harness.workload.touch_every_table()  # every table is in the next range's run
    harness.capture()
    at_before = {t.name: mirror_lsn(harness.source, t) for t in harness.source.tables}
    (request,) = harness.tick().run_requests
    lsn_range = LsnRange.parse_key(request.partition_key)
    victim = next(t for t in harness.source.tables if t.instance.key_columns)
    conn = harness.source.connect()
    try:
        cdc_admin.cleanup_change_table(conn, victim.instance.name, lsn_range.hi, threshold=5000)
        assert get_min_lsn(conn, victim.instance.name) > lsn_range.first
    finally:
        conn.close()
    result = harness.execute(request)
    assert not result.success
    return victim, request, result, at_before


def test_cleanup_gap_resnapshots_the_table_and_rebuilds_its_mirror(harness: SyncHarness) -> None:
    """``on_gap: resnapshot``: the sensor re-snapshots exactly the table that lost changes
    (saying why), the range is read again past the new snapshot, and every mirror ends equal to
    its source table — nothing lost."""
    victim, failed, _, _ = _cleanup_next_range(harness)
    data = harness.tick()
    (request,) = data.run_requests
    assert request.partition_key == SNAPSHOT_PARTITION
    assert request.asset_selection == [victim.change_log_key]
    assert "could not be read" in request.tags[RESNAPSHOT_TAG]
    result = harness.execute(request)
    assert result.success, failure_text(result)
    reason = _materialized(result, victim.change_log_key)["snapshot_reason"].value
    assert failed.partition_key in reason

    for _ in range(6):  # the source keeps changing meanwhile
        harness.workload.step()
    harness.capture()
    harness.sync()
    assert harness.source.store.is_published(victim.change_log_key.path, failed.partition_key)
    harness.assert_mirrors_equal_source()
    position = mirror_position(harness.source, victim)
    snapshot = harness.source.store.current_version(victim.change_log_key.path, SNAPSHOT_PARTITION)
    assert position is not None and snapshot is not None
    assert position.snapshot_version == snapshot, "the mirror was not rebuilt"


def test_cleanup_gap_with_on_gap_fail_waits_for_a_person(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(tmp_path, spark, instance, on_gap="fail")
    victim, *_ = _cleanup_next_range(harness)
    data = harness.tick()
    assert not data.run_requests
    assert "on_gap = fail" in (data.skip_message or "")
    assert victim.qualified_name in (data.skip_message or "")


def test_a_tick_sends_one_query_whatever_the_number_of_tables(
    harness: SyncHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle tick asks the source for the max LSN only — not one query per table."""
    harness.sync()
    for _ in range(3):
        harness.workload.step()
    harness.capture()
    harness.sync()
    sent = _record_queries(monkeypatch)
    data = harness.tick()
    assert not data.run_requests
    assert len(harness.source.tables) == 5
    assert len(sent) == 1 and "fn_cdc_get_max_lsn" in sent[0], sent


def test_schema_change_switches_to_the_new_capture_instance(harness: SyncHarness) -> None:
    """``ALTER TABLE … ADD`` plus a second capture instance: the range that reaches the new
    instance is refused for that table with the schema change named, the table is
    re-snapshotted with the new instance, and its mirror gains the column with exact values
    (also for rows updated between the ALTER and the new instance, which no change row has)."""
    harness.sync()
    for _ in range(5):
        harness.workload.step()
    harness.capture()
    harness.sync()
    customers = next(t for t in harness.source.tables if t.name == "customers")
    conn = harness.source.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("ALTER TABLE [dbo].[customers] ADD [loyalty points] int NULL")
        cursor.execute("UPDATE [dbo].[customers] SET [loyalty points] = [customer_id] % 7")
        cdc_admin.enable_table(
            conn,
            "dbo",
            "customers",
            capture_instance="dbo_customers_v2",
            supports_net_changes=True,
        )
        harness.capture()
        cursor.execute(
            "UPDATE [dbo].[customers] SET [loyalty points] = [loyalty points] + 100 "
            "WHERE [customer_id] % 2 = 0"
        )
    finally:
        conn.close()
    for _ in range(4):
        harness.workload.step()
    harness.capture()

    (request,) = harness.tick().run_requests
    result = harness.execute(request)
    assert result.success  # the table waits for its re-snapshot, the run does not fail for it
    refused = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == customers.change_log_key and e.check_name == "coverage"
    )
    assert not refused.passed
    assert "dbo_customers_v2" in (refused.description or "")
    assert "loyalty points" in (refused.description or "")
    evaluations = result.get_asset_check_evaluations()
    mine = (customers.change_log_key, customers.mirror_key)
    others = [e.passed for e in evaluations if e.asset_key not in mine]
    assert others and all(others), "only the changed table is refused"
    # its mirror stays where it was, without failing the run: the sync is on its way (the
    # sensor re-snapshots the table next), as its at_chain_end says
    moved = {e.asset_key for e in result.get_asset_materialization_events()}
    assert customers.mirror_key not in moved
    (behind,) = [e for e in evaluations if e.asset_key == customers.mirror_key]
    assert behind.check_name == "at_chain_end" and behind.passed, behind.description

    harness.sync()  # the re-snapshot, then the range again
    harness.capture()  # capture passes the new snapshot's LSN
    harness.sync()  # the mirror is rebuilt from the new snapshot
    mirror = harness.source.store.read(harness.spark, customers.mirror_key.path, None)
    assert "loyalty points" in mirror.columns
    conn = harness.source.connect()
    try:
        instance = discover(conn)[("dbo", "customers")].current_instance
    finally:
        conn.close()
    assert instance is not None and instance.name == "dbo_customers_v2"
    settings = harness.source.config.connection_settings()
    current = sqlserver_source.drop_snapshot_columns(
        sqlserver_source.read_snapshot(harness.spark, settings, instance, mode="exact")
    )
    columns = [f"`{c}`" for c in instance.column_names]
    current, mirror = current.select(*columns).cache(), mirror.select(*columns).cache()
    assert current.count() == mirror.count() > 0
    assert not current.exceptAll(mirror).limit(3).collect()
    assert not mirror.exceptAll(current).limit(3).collect()
    current.unpersist()
    mirror.unpersist()
    harness.assert_mirrors_equal_source()  # the other tables, and the old columns


def test_a_column_added_without_a_new_capture_instance_is_reported(harness: SyncHarness) -> None:
    harness.sync()
    conn = harness.source.connect()
    try:
        conn.cursor().execute("ALTER TABLE [dbo].[products] ADD [shelf] nvarchar(10) NULL")
    finally:
        conn.close()
    for _ in range(4):
        harness.workload.step()
    harness.capture()
    data = harness.tick()
    result = harness.execute(data.run_requests[0])
    assert result.success, failure_text(result)
    products = next(t for t in harness.source.tables if t.name == "products")
    note = _materialized(result, products.change_log_key)["columns_not_captured"].value
    assert note.startswith("shelf:") and "second capture instance" in note
    customers = next(t for t in harness.source.tables if t.name == "customers")
    assert _materialized(result, customers.change_log_key)["columns_not_captured"].value == "none"
    harness.assert_mirrors_equal_source()
