"""The mirrors' ``at_chain_end`` check result, and check results reported as events.

A range run's mirrors step reports ``at_chain_end`` for each of its mirrors itself, yielded as an
evaluation, instead of a check step after it: a mirrors step that fails for one table (its mirror
stays where it was) would leave such a step unexecuted, and the UI would show every mirror of the
run red ("execution failed") although only one is behind. The change-log step does the same for
the quiet tables it records. Evaluations are yielded before the step may raise its Failure: events
logged with ``context.log_event`` reach Dagster only with the step's next yield. The check stays
defined in :mod:`..mirror_checks`, so "Execute checks" in the UI runs it on demand.
"""

from dagster import AssetCheckEvaluation, AssetCheckResult, AssetCheckSeverity

from cdc_assets.lsn import Lsn

from .source import CapturedTable

AT_CHAIN_END = "at_chain_end"


def at_chain_end_result(table: CapturedTable, at: str | None, end: Lsn | None) -> AssetCheckResult:
    """``at_chain_end`` for a mirror at ``at`` (an LSN's hex, None before its first build)."""
    passed = end is not None and at == end.hex
    return AssetCheckResult(
        asset_key=table.mirror_key,
        check_name=AT_CHAIN_END,
        passed=passed,
        severity=AssetCheckSeverity.WARN,
        description="the mirror is at the end of the chain"
        if passed
        else f"the mirror is at {at or 'nothing yet'}, the chain ends at "
        f"{end.hex if end else 'nothing yet'}: the sync sensor has a range to apply (or a failed "
        "run to look at).",
        metadata={"mirror_lsn": at or "none", "chain_end": end.hex if end else "none"},
    )


def as_evaluation(result: AssetCheckResult, partition: str | None) -> AssetCheckEvaluation:
    """``result`` as an event a step may log for a check outside its selection."""
    assert result.asset_key is not None and result.check_name is not None
    return AssetCheckEvaluation(
        asset_key=result.asset_key,
        check_name=result.check_name,
        passed=result.passed,
        metadata=result.metadata,
        severity=result.severity,
        description=result.description,
        partition=partition,
    )
