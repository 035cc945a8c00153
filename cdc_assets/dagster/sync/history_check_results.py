"""A history's checks that are the mirror's (the same rule, made by the same call), reported on
the history: ``at_chain_end`` (:mod:`.chain_end_check`; the histories step reports it for each
history of its run, the change-log step for each quiet table's history it records, as they do
for mirrors) and ``reconcile`` (:mod:`..mirror_checks`, in the health job)."""

from dataclasses import replace

from dagster import AssetCheckResult

from cdc_assets.lsn import Lsn

from .chain_end_check import ChainEndView
from .source import CapturedTable
from .sync_state import TableSync


def on_history(result: AssetCheckResult, table: CapturedTable) -> AssetCheckResult:
    """A mirror check's ``result`` as the same check of ``table``'s history: its key, and
    "history" where it says "mirror" (also in its metadata keys)."""
    metadata = {
        key.replace("mirror", "history"): value for key, value in (result.metadata or {}).items()
    }
    return result._replace(
        asset_key=table.history_key,
        description=(result.description or "").replace("mirror", "history"),
        metadata=metadata,
    )


def history_at_chain_end(
    view: ChainEndView, table: CapturedTable, at: Lsn | None, row: TableSync
) -> AssetCheckResult:
    """``at_chain_end`` of ``table``'s history at ``at`` (None: not built yet), judged as the
    mirror's is, with the history's own failures (``row``'s history fields) as the table's."""
    own = replace(
        row,
        failures=row.history_failures,
        failed_at=row.history_failed_at,
        failure=row.history_failure,
    )
    return on_history(view.result(table.history_key, table, at, own), table)
