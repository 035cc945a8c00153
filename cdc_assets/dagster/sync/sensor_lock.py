"""A lock held in the Dagster instance, so evaluations of one source's sensor never overlap,
wherever they run and wherever the storage is (a local directory or an object store).

Dagster evaluates one sensor's ticks one at a time, but two daemons, or a tick and a manual
evaluation, can overlap: each would plan ``(end, max]`` with its own max and add overlapping
ranges. Under this lock an evaluation sees the partition the previous one added.

The lock is a queue in the instance's dynamic-partitions table (``<source>_sensor_lock``), which
every Dagster storage (SQLite, Postgres, MySQL) keeps in insertion order: an evaluation adds a
token of its own, and holds the lock when its token is the oldest live one; it removes its token
when it is done. A token older than ``STALE_SECONDS`` belongs to an evaluation that died holding
the lock (a killed daemon): the next evaluation removes it and goes on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import DagsterInstance

WAIT_SECONDS = 30.0
STALE_SECONDS = 300.0  # far above an evaluation's few seconds; a dead holder blocks this long
POLL_SECONDS = 0.05


def lock_name(source: str) -> str:
    """The dynamic-partitions name that holds the lock queue of ``source``'s sensor."""
    return f"{source}_sensor_lock"


def _token() -> str:
    return f"{time.time():.6f}-{uuid.uuid4().hex}"


def _age(token: str, now: float) -> float:
    try:
        return now - float(token.split("-", 1)[0])
    except ValueError:
        return float("inf")  # not a token of ours: never blocks


@contextmanager
def sensor_lock(
    instance: DagsterInstance, source: str, wait_seconds: float = WAIT_SECONDS
) -> Iterator[bool]:
    """Holds ``source``'s sensor lock (True), or gives up after ``wait_seconds`` (False)."""
    name, token = lock_name(source), _token()
    instance.add_dynamic_partitions(name, [token])
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            now = time.time()
            queue = instance.get_dynamic_partitions(name)
            for stale in (t for t in queue if t != token and _age(t, now) > STALE_SECONDS):
                instance.delete_dynamic_partition(name, stale)
            live = [t for t in queue if t == token or _age(t, now) <= STALE_SECONDS]
            if live and live[0] == token:
                break
            if time.monotonic() > deadline:
                yield False
                return
            time.sleep(POLL_SECONDS)
        yield True
    finally:
        instance.delete_dynamic_partition(name, token)
