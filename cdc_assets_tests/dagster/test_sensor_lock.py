"""The sensor's lock lives in the Dagster instance (no file, whatever the storage): holders take
turns in the order they asked, a holder that died does not block for ever, a waiter gives up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from dagster import DagsterInstance, instance_for_test

from cdc_assets.dagster.sync import sensor_lock as lock_module
from cdc_assets.dagster.sync.sensor_lock import lock_name, sensor_lock


@pytest.fixture
def lock_instance() -> Iterator[DagsterInstance]:
    with instance_for_test() as instance:
        yield instance


def test_holders_take_turns_in_the_order_they_asked(lock_instance: DagsterInstance) -> None:
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    first_in = threading.Event()

    def hold(name: str, seconds: float) -> None:
        with sensor_lock(lock_instance, "shop") as locked:
            assert locked
            inside.append(name)
            if len(inside) > 1 and inside[-2] != "done":
                overlaps.append(tuple(inside))
            first_in.set()
            time.sleep(seconds)
            inside.append("done")

    first = threading.Thread(target=hold, args=("a", 0.5))
    first.start()
    assert first_in.wait(10)
    second = threading.Thread(target=hold, args=("b", 0.0))
    second.start()
    time.sleep(0.2)
    assert inside == ["a"]  # b waits while a holds the lock
    first.join(10)
    second.join(10)
    assert inside == ["a", "done", "b", "done"] and not overlaps
    assert lock_instance.get_dynamic_partitions(lock_name("shop")) == []  # both removed theirs


def test_a_dead_holder_blocks_only_until_its_token_is_stale(
    lock_instance: DagsterInstance,
) -> None:
    dead = f"{time.time() - lock_module.STALE_SECONDS - 1:.6f}-dead"
    lock_instance.add_dynamic_partitions(lock_name("shop"), [dead])
    with sensor_lock(lock_instance, "shop", wait_seconds=1) as locked:
        assert locked
    assert lock_instance.get_dynamic_partitions(lock_name("shop")) == []


def test_a_waiter_gives_up_and_leaves_no_token(lock_instance: DagsterInstance) -> None:
    alive = f"{time.time():.6f}-alive"
    lock_instance.add_dynamic_partitions(lock_name("shop"), [alive])
    with sensor_lock(lock_instance, "shop", wait_seconds=0.3) as locked:
        assert not locked
    assert lock_instance.get_dynamic_partitions(lock_name("shop")) == [alive]
    with sensor_lock(lock_instance, "other", wait_seconds=0.3) as locked:
        assert locked  # one source's lock does not hold back another's
