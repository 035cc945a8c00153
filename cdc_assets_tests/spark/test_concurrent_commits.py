"""A commit that lost to a concurrent one is run again; any other error stands at once."""

from __future__ import annotations

import pytest

from cdc_assets.spark.concurrent_commits import is_conflict, retry_conflicts

# the text a Spark Connect client shows for the conflict met under `make demo` (maintenance
# setting a mirror's history retention while a range merged into it)
LOST = (
    "(io.delta.exceptions.MetadataChangedException) [DELTA_METADATA_CHANGED] "
    "MetadataChangedException: The metadata of the Delta table delta.`file:/x` has been "
    "changed by a concurrent update. Please try the operation again."
)


def test_a_lost_commit_is_run_again_until_it_lands() -> None:
    calls: list[int] = []

    def commit() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(LOST)
        return "committed"

    assert retry_conflicts(commit, "test commit") == "committed"
    assert len(calls) == 3


def test_other_errors_and_the_last_attempt_stand() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("DELTA_MISSING_DELTA_TABLE")

    with pytest.raises(ValueError):
        retry_conflicts(broken, "test commit")
    assert len(calls) == 1 and not is_conflict(ValueError("DELTA_MISSING_DELTA_TABLE"))

    def always_lost() -> None:
        calls.append(1)
        raise RuntimeError(LOST)

    with pytest.raises(RuntimeError, match="DELTA_METADATA_CHANGED"):
        retry_conflicts(always_lost, "test commit", attempts=2)
    assert len(calls) == 3
