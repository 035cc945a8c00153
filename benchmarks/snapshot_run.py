"""One run of a one-table source's sync job for its ``snapshot`` partition, timed: what the
snapshot benchmarks measure (``masked_snapshot``, ``snapshot_end_to_end``, ``snapshot_resume``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagster import Definitions, instance_for_test

from cdc_assets.config import ProjectConfig
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG, step_seconds
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, partitions_name, sync_job_name
from cdc_assets.dagster.sync.source import CapturedTable, Source, load_source


@dataclass(frozen=True)
class SnapshotRun:
    source: Source
    defs: Definitions
    table: CapturedTable
    seconds: float  # the run, from its start to its end
    steps: dict[str, float]  # each step's seconds
    success: bool

    @property
    def published(self) -> dict[str, Any]:
        """The properties of the change log's ``snapshot`` partition the run published."""
        path = self.table.change_log_key.path
        return self.source.store.properties(path, SNAPSHOT_PARTITION) or {}


def run_snapshot(
    config: ProjectConfig,
    *,
    instance_dir: str | None = None,
    before_run: Callable[[], None] | None = None,
) -> SnapshotRun:
    """Materialize the ``snapshot`` partition of the first table's change log of ``config``'s
    source in a fresh instance (``instance_dir``: where it keeps its files); ``before_run`` is
    called once everything is set up, right before the timed run starts."""
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    table = source.tables[0]
    job = defs.resolve_job_def(sync_job_name(source.name))
    with instance_for_test(temp_dir=instance_dir) as instance:
        instance.add_dynamic_partitions(partitions_name(source.name), [SNAPSHOT_PARTITION])
        if before_run is not None:
            before_run()
        started = time.perf_counter()
        result = job.execute_in_process(
            instance=instance,
            partition_key=SNAPSHOT_PARTITION,
            asset_selection=[table.change_log_key],
            run_config=QUIET_RUN_CONFIG,
            raise_on_error=False,
        )
        seconds = time.perf_counter() - started
        steps = step_seconds(instance, result.run_id)
    return SnapshotRun(source, defs, table, seconds, steps, result.success)
