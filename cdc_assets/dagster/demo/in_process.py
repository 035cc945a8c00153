"""The sync sensor and the runs it requests, driven in this process (no daemon, no run launcher):
what the headless demo, the tests and the benchmarks use.

A tick is evaluated as the daemon evaluates it — with the instance's ref, so run requests for the
dynamic partitions the tick adds validate — and its partition requests are then applied to the
instance. A run request executes as the daemon launches it: its partition, tags and assets, and
only the asset checks it names when it names them.
"""

from __future__ import annotations

from typing import Any

from dagster import (
    DagsterInstance,
    Definitions,
    DynamicPartitionsDefinition,
    ExecuteInProcessResult,
    JobDefinition,
    RunRequest,
    build_sensor_context,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData

from ..sync.chain import add_partition
from ..sync.names import sensor_name
from ..sync.source import Source
from ..sync_sensor import Tick, evaluate

# The runs' events go to the instance; the console shows errors only.
QUIET_RUN_CONFIG: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def evaluate_sensor(
    defs: Definitions, instance: DagsterInstance, source: str, cursor: str | None = None
) -> SensorExecutionData:
    """One evaluation of the sync sensor of ``source`` from ``cursor``; nothing applied."""
    name = sensor_name(source)
    context = build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        definitions=defs,
        cursor=cursor,
        sensor_name=name,
    )
    return defs.resolve_sensor_def(name).evaluate_tick(context)


def apply_partition_requests(instance: DagsterInstance, data: SensorExecutionData) -> None:
    """Add the dynamic partitions a tick asked for, as the daemon does."""
    for request in data.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(
            request.partitions_def_name, list(request.partition_keys or [])
        )


def tick_sensor(
    defs: Definitions, instance: DagsterInstance, source: str, cursor: str | None = None
) -> SensorExecutionData:
    """:func:`evaluate_sensor`, then its partition requests applied."""
    data = evaluate_sensor(defs, instance, source, cursor)
    apply_partition_requests(instance, data)
    return data


def execute_request(
    job: JobDefinition,
    instance: DagsterInstance,
    request: RunRequest,
    *,
    run_config: dict[str, Any] | None = None,
) -> ExecuteInProcessResult:
    """Run ``request`` of ``job`` in this process as the daemon launches it; a failed run is
    returned, not raised."""
    selection = request.asset_selection
    if request.asset_check_keys is not None:  # these checks only
        job = job.get_subset(
            asset_selection=set(selection or []),
            asset_check_selection=set(request.asset_check_keys),
        )
        selection = None
    return job.execute_in_process(
        instance=instance,
        partition_key=request.partition_key,
        asset_selection=selection,
        tags=request.tags,
        run_config=QUIET_RUN_CONFIG if run_config is None else run_config,
        raise_on_error=False,
    )


def sync_step(
    job: JobDefinition, instance: DagsterInstance, source: Source
) -> tuple[Tick, ExecuteInProcessResult | None]:
    """One decision of the sync sensor's logic for ``source`` (without a sensor context), its new
    partition added and its runs executed one after the other (a snapshot run, then a range
    run, where the daemon would launch them side by side); the result of the first that failed,
    else of the last; no result when there was nothing to run."""
    partitions = job.partitions_def
    assert isinstance(partitions, DynamicPartitionsDefinition), job.name
    tick = evaluate(instance, source, partitions)
    if not tick.run_requests:
        return tick, None
    if tick.new_partition is not None:
        add_partition(instance, str(partitions.name), tick.new_partition)
    results = [execute_request(job, instance, request) for request in tick.run_requests]
    return tick, next((r for r in results if not r.success), results[-1])


def step_seconds(instance: DagsterInstance, run_id: str) -> dict[str, float]:
    """How long each step of a finished run took, by step key."""
    return {
        s.step_key: (s.end_time or 0) - (s.start_time or 0)
        for s in instance.get_run_step_stats(run_id)
    }
