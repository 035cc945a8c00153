"""A source's tables split into steps of at most :data:`TABLES_PER_STEP`: one change-log and one
mirror multi-asset per group of tables, each a step of the sync job.

Why not one multi-asset for all of a source's tables: for every output a step yields, Dagster
(1.13) checks the step's other outputs against the set of every asset and check the step has
selected, built anew each time (``StepExecutionContext.get_output_asset_keys``). A step's cost in
Dagster alone grows with the cube of its selected tables: measured ~30 s per step for a run over
1,000 tables (a first sync, or a range that touches them all), a third of that run; in steps of
100 tables it is a few milliseconds. A range that touches few tables selects few steps.

Groups follow the source's table order (sorted), so a table stays in its group until tables are
added before it; the asset keys, and with them everything Dagster keeps about an asset, do not
depend on the group.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from dagster import AssetKey, AssetOut, PartitionsDefinition

from .io_manager import CURRENT_LAYOUT, LAYOUT
from .metadata import asset_tags, table_metadata
from .names import IO_MANAGER, group_name
from .source import CapturedTable, Source

TABLES_PER_STEP = 100


def table_groups(tables: Sequence[CapturedTable]) -> list[list[CapturedTable]]:
    """``tables`` in order, in groups of at most :data:`TABLES_PER_STEP` (one when empty)."""
    size = max(1, TABLES_PER_STEP)
    groups = [list(tables[i : i + size]) for i in range(0, len(tables), size)]
    return groups or [[]]


def step_name(base: str, index: int, groups: int) -> str:
    """The multi-asset (op) name of group ``index``: ``base`` itself when there is one group."""
    return base if groups == 1 else f"{base}_{index + 1:03d}"


def records_quiet_tables(
    groups: Sequence[Sequence[CapturedTable]], index: int, run_selection: Collection[AssetKey]
) -> bool:
    """Whether the change-log step of group ``index`` records the tables the run does not work
    on (:mod:`.quiet_ranges`): exactly one step does, the first group with a change log in the
    run's selection (``run_selection``: every asset the run materializes)."""
    for i, group in enumerate(groups):
        if any(t.change_log_key in run_selection for t in group):
            return i == index
    return False


def current_table_out(
    source: Source, table: CapturedTable, key: AssetKey, description: str, **extra: Any
) -> AssetOut:
    """The output of ``table``'s asset ``key`` that is one Delta table moved forward by every
    range (a mirror, a history: the ``current`` layout), in the source's group; ``extra``: more
    of :class:`AssetOut`'s arguments."""
    return AssetOut(
        key=key,
        is_required=False,
        io_manager_key=IO_MANAGER,
        group_name=group_name(source.name),
        kinds={"spark", "delta"},
        description=description,
        metadata={LAYOUT: CURRENT_LAYOUT, **table_metadata(table.instance, table.qualified_name)},
        owners=list(source.config.owners),
        tags=asset_tags(source.config, table.schema),
        **extra,
    )


def after_change_logs(
    name: str,
    partitions: PartitionsDefinition,
    tables: Sequence[CapturedTable],
    outs: Mapping[CapturedTable, AssetOut],
    key_of: Callable[[CapturedTable], AssetKey],
) -> dict[str, Any]:
    """The ``multi_asset`` arguments of a step whose outputs (``outs``, one per table, the
    asset ``key_of`` it) each follow their table's change log on the same partitions (the
    mirrors, the histories)."""
    return {
        "name": name,
        "outs": {key_of(t).to_python_identifier(): out for t, out in outs.items()},
        "can_subset": True,
        "partitions_def": partitions,
        "deps": [t.change_log_key for t in tables],
        "internal_asset_deps": {
            key_of(t).to_python_identifier(): {t.change_log_key} for t in tables
        },
        "required_resource_keys": {"pyspark"},
    }
