"""The schedules of a source's housekeeping jobs (health and maintenance): a job that never runs
beside itself, and whose runs give way to the sync's.

Under load a maintenance run can take longer than its schedule's interval; a plain schedule then
starts the next one beside it, the runs pile up in the run queue and hold the slots of
``max_concurrent_runs`` that the range runs need, the sync falls behind CDC retention, and tables
are re-snapshotted (seen in the soak benchmark). So a tick while a run of the job is queued or in
flight is skipped (saying which run), every housekeeping run carries :data:`HOUSEKEEPING_TAG`
(``<source name>``, for the run queue's ``tag_concurrency_limits``: one housekeeping run per
source at a time) and a lower run priority than the sync's, so a free slot goes to a range run
first.
"""

from __future__ import annotations

from dagster import (
    DagsterRunStatus,
    DefaultScheduleStatus,
    JobDefinition,
    RunRequest,
    RunsFilter,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)
from dagster._core.storage.dagster_run import IN_PROGRESS_RUN_STATUSES
from dagster._core.storage.tags import PRIORITY_TAG

from .sync.names import HOUSEKEEPING_TAG

NOT_ENDED = [DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, *IN_PROGRESS_RUN_STATUSES]
# the run queue launches runs of higher priority first; the sync's runs have the default, 0
LOWER_PRIORITY = "-1"


def housekeeping_tags(source_name: str) -> dict[str, str]:
    """The tags of a housekeeping job of the source ``source_name`` (every run of it has them,
    also one launched from the UI)."""
    return {HOUSEKEEPING_TAG: source_name, PRIORITY_TAG: LOWER_PRIORITY}


def one_at_a_time_schedule(
    name: str, job: JobDefinition, cron: str, description: str
) -> ScheduleDefinition:
    """A schedule of ``job`` on ``cron`` (running by default) that skips a tick while a run of
    the job has not ended."""

    @schedule(
        name=name,
        job=job,
        cron_schedule=cron,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"{description} A tick while the job's last run has not ended is skipped.",
    )
    def _one_at_a_time(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
        running = context.instance.get_runs(
            RunsFilter(job_name=job.name, statuses=NOT_ENDED), limit=1
        )
        if running:
            run = running[0]
            return SkipReason(
                f"run {run.run_id} of {job.name} has not ended ({run.status.value}): this tick "
                "is skipped, so the job never runs beside itself"
            )
        return RunRequest()  # with the job's tags (housekeeping_tags)

    return _one_at_a_time
