"""Housekeeping that holds for weeks: the health and maintenance jobs never run beside themselves
and give way to the sync's runs (the soak benchmark saw maintenance runs pile up in the run
queue and starve the range runs); reconcile counts a quiet mirror whose position commit is
older than the history maintenance keeps (Delta refuses time travel that far)."""

from __future__ import annotations

import time
from pathlib import Path

from dagster import (
    AssetCheckKey,
    DagsterInstance,
    DagsterRunStatus,
    ScheduleDefinition,
    build_schedule_context,
)
from dagster._core.storage.tags import PRIORITY_TAG
from dagster._core.test_utils import create_run_for_test

from cdc_assets import emulator
from cdc_assets.dagster.demo.instance_settings import write_instance_settings
from cdc_assets.dagster.mirror_checks import RECONCILE
from cdc_assets.dagster.sync.names import HOUSEKEEPING_TAG, health_job_name, maintenance_job_name
from cdc_assets.spark.delta_location import local_path

from .conftest import QUIET, SOURCE, SyncHarness, failure_text


def test_housekeeping_jobs_never_run_beside_themselves_and_give_way_to_the_sync(
    harness: SyncHarness, tmp_path: Path
) -> None:
    for name in (maintenance_job_name(SOURCE), health_job_name(SOURCE)):
        job = harness.defs.resolve_job_def(name)
        schedule = harness.defs.resolve_schedule_def(f"{name}_schedule")
        # every run of it is one of the source's housekeeping runs, after the sync's in the queue
        assert job.tags[HOUSEKEEPING_TAG] == SOURCE
        assert int(job.tags[PRIORITY_TAG]) < 0

        def tick(schedule: ScheduleDefinition = schedule) -> tuple[int, str | None]:
            with build_schedule_context(instance=harness.instance) as context:
                data = schedule.evaluate_tick(context)
            return len(data.run_requests or []), data.skip_message

        assert tick() == (1, None)
        for status in (DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTED):
            run = create_run_for_test(harness.instance, job_name=name, status=status)
            requests, skipped = tick()
            assert requests == 0 and skipped is not None, (name, status)
            assert run.run_id in skipped and "never runs beside itself" in skipped
            harness.instance.delete_run(run.run_id)
        ended = create_run_for_test(
            harness.instance, job_name=name, status=DagsterRunStatus.FAILURE
        )
        assert tick() == (1, None), ended.run_id

    # make demo's instance: one housekeeping run per source at a time
    home = tmp_path / "dagster_home"
    write_instance_settings(home)
    demo = DagsterInstance.from_config(str(home))
    try:
        limits = demo.get_concurrency_config().run_queue_config.tag_concurrency_limits
    finally:
        demo.dispose()
    assert {
        "key": HOUSEKEEPING_TAG,
        "value": {"applyLimitPerUniqueValue": True},
        "limit": 1,
    } in limits


def test_reconcile_counts_a_mirror_quiet_for_longer_than_the_history_kept(
    harness: SyncHarness,
) -> None:
    assert harness.sync() == 1  # the snapshot
    for _ in range(4):
        harness.workload.step()
    harness.capture()
    assert harness.sync() == 1
    table = harness.source.tables[0]
    # as maintenance leaves a mirror: a commit after the position's (its retention), and a
    # deleted-file retention the position commit is older than
    location = harness.source.store.location(table.mirror_key.path)
    assert local_path(location) is not None
    harness.spark.sql(
        f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES "
        "('delta.deletedFileRetentionDuration' = 'interval 1 seconds')"
    )
    time.sleep(2)
    key = AssetCheckKey(table.mirror_key, RECONCILE)
    job = harness.defs.resolve_job_def(health_job_name(SOURCE)).get_subset(
        asset_check_selection={key}
    )
    with emulator.CaptureAgent(harness.db):  # reconcile waits for capture to pass its count
        result = job.execute_in_process(instance=harness.instance, run_config=QUIET)
    assert result.success, failure_text(result)
    [evaluation] = [
        e.event_specific_data
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    ]
    assert evaluation.passed, evaluation.description
