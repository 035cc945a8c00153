"""A healthy sync looks healthy: after the snapshot and a range, no partition of a mirror stays
missing (the run that rebuilt it from its snapshot also records its 'snapshot' partition), and
every check an asset shows has been evaluated: the change logs' blocking checks, the mirrors'
at_chain_end and the change logs' capture_health with each sync run, reconcile by the health job
(every 5 minutes by its schedule). A stopped capture agent still fails capture_health: the
health job checks it while no sync run happens (the max LSN stands still)."""

from __future__ import annotations

from dagster import AssetCheckKey, DefaultScheduleStatus

from cdc_assets import emulator
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, health_job_name
from cdc_assets.sqlserver import cdc_admin, discover

from .conftest import QUIET, SyncHarness, failure_text


def _latest_evaluations(harness: SyncHarness) -> dict[AssetCheckKey, bool | None]:
    graph = harness.defs.resolve_asset_graph()
    found: dict[AssetCheckKey, bool | None] = {}
    for key in graph.asset_check_keys:
        record = harness.instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [key]
        ).get(key)
        evaluation = record.evaluation if record is not None else None
        found[key] = evaluation.passed if evaluation is not None else None
    return found


def test_every_partition_and_check_of_a_synced_source_is_green(harness: SyncHarness) -> None:
    assert harness.sync() == 1  # the snapshot
    for _ in range(8):
        harness.workload.step()
    harness.capture()
    assert harness.sync() == 1  # one range
    partitions = set(harness.instance.get_dynamic_partitions("shop_lsn"))
    for table in harness.source.tables:
        for key in (table.change_log_key, table.mirror_key):
            materialized = harness.instance.get_materialized_partitions(key)
            assert materialized == partitions, (key.to_user_string(), materialized)
    # the SQL Server tables (external assets) show what the runs learnt of them: read by the
    # snapshot, changed in the range; none is 'never materialized'
    for table in harness.source.tables:
        events = harness.instance.fetch_materializations(table.source_key, limit=10).records
        descriptions = [r.event_log_entry.asset_materialization.description for r in events]
        assert any("read whole by the snapshot" in (d or "") for d in descriptions), descriptions
    mirror = harness.source.tables[0].mirror_key
    snapshot_events = harness.instance.fetch_materializations(mirror, limit=10).records
    assert any(
        r.event_log_entry.asset_materialization.partition == SNAPSHOT_PARTITION
        for r in snapshot_events
    )

    # reconcile runs in the health job (on a schedule, running by default)
    schedule = harness.defs.resolve_schedule_def(f"{health_job_name('shop')}_schedule")
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    job = harness.defs.resolve_job_def(health_job_name("shop"))
    with emulator.CaptureAgent(harness.db):  # reconcile waits for capture to pass its count
        result = job.execute_in_process(instance=harness.instance, run_config=QUIET)
    assert result.success, failure_text(result)

    evaluations = _latest_evaluations(harness)
    assert all(evaluations.values()), {
        f"{k.asset_key.to_user_string()}:{k.name}": v for k, v in evaluations.items() if not v
    }

    # A stopped capture agent: no range comes, the health job turns capture_health red.
    conn = harness.source.connect()
    try:
        cdc_admin.stop_job(conn, "capture")
        assert discover(conn)
    finally:
        conn.close()
    for _ in range(3):
        harness.workload.step()
    health = AssetCheckKey(harness.source.tables[0].change_log_key, "capture_health")
    subset = job.get_subset(asset_check_selection={health})
    result = subset.execute_in_process(instance=harness.instance, run_config=QUIET)
    assert result.success, failure_text(result)
    assert _latest_evaluations(harness)[health] is False
