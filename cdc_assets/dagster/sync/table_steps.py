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

from collections.abc import Collection, Sequence

from dagster import AssetKey

from .source import CapturedTable

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
