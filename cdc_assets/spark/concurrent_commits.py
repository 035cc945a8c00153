"""Retry a Delta commit that lost to a concurrent one.

Delta's optimistic concurrency refuses a commit when another one changed what it relied on (the
maintenance job setting a table's history retention while a range merges into it, for example):
the losing writer committed nothing and Delta says "Please try the operation again". Every
commit of this project is idempotent (a partition replaced by predicate, a mirror merged from
the LSN its last commit recorded), so it is run again a few times before the error stands."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Delta's error classes for a commit that lost to a concurrent one (io.delta.exceptions.*)
CONFLICTS = (
    "DELTA_CONCURRENT_APPEND",
    "DELTA_CONCURRENT_DELETE_DELETE",
    "DELTA_CONCURRENT_DELETE_READ",
    "DELTA_CONCURRENT_TRANSACTION",
    "DELTA_CONCURRENT_WRITE",
    "DELTA_METADATA_CHANGED",
    "DELTA_PROTOCOL_CHANGED",
)
ATTEMPTS = 4


def is_conflict(exc: BaseException) -> bool:
    text = str(exc)
    return any(name in text for name in CONFLICTS)


def retry_conflicts(commit: Callable[[], T], what: str, *, attempts: int = ATTEMPTS) -> T:
    """``commit()``, run again (after 0.5, 1, 2 s) while it loses to a concurrent commit."""
    for attempt in range(1, attempts + 1):
        try:
            return commit()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            delay = 0.5 * 2 ** (attempt - 1)
            name = next(n for n in CONFLICTS if n in str(exc))
            log.warning("%s lost to a concurrent commit (%s); again in %.1f s", what, name, delay)
            time.sleep(delay)
    raise AssertionError("unreachable")
