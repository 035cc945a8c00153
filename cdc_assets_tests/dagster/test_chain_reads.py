"""Reading the LSN chain from a real instance's keys, newest first, a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dagster import DagsterInstance, instance_for_test

from cdc_assets.dagster.sync.chain import (
    PAGE,
    chain_end,
    recent_ranges,
    retire,
    retired_through,
)
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION
from cdc_assets.lsn import Lsn, LsnRange

NAME = "src_lsn"


def _chain(count: int) -> list[LsnRange]:
    return [LsnRange(Lsn.from_parts(7, i, 0), Lsn.from_parts(7, i + 1, 0)) for i in range(count)]


@pytest.fixture
def counted() -> Iterator[tuple[DagsterInstance, list[int]]]:
    """An instance whose paginated key reads are counted (keys read per call)."""
    with instance_for_test() as instance:
        read: list[int] = []
        real = instance.get_paginated_dynamic_partitions

        def counting(*args: Any, **kwargs: Any) -> Any:
            page = real(*args, **kwargs)
            read.append(len(page.results))
            return page

        instance.get_paginated_dynamic_partitions = counting  # type: ignore[method-assign]
        yield instance, read


def test_the_end_is_read_from_the_newest_page(counted: tuple[DagsterInstance, list[int]]) -> None:
    instance, read = counted
    ranges = _chain(5 * PAGE)
    instance.add_dynamic_partitions(NAME, [SNAPSHOT_PARTITION, *(r.key for r in ranges)])
    newest = recent_ranges(instance, NAME)
    assert chain_end(newest) == ranges[-1].hi
    assert newest == ranges[-PAGE:]
    assert read == [PAGE]


def test_reaching_back_reads_pages_until_the_lsn(
    counted: tuple[DagsterInstance, list[int]],
) -> None:
    instance, read = counted
    ranges = _chain(5 * PAGE)
    instance.add_dynamic_partitions(NAME, [r.key for r in ranges])
    back = ranges[-2 * PAGE - 3]
    found = recent_ranges(instance, NAME, reach=back.hi)
    assert found[0].lo < back.hi <= found[-1].hi and found[-1] == ranges[-1]
    assert [r for r in found if r.hi > back.hi] == ranges[-2 * PAGE - 2 :]
    assert len(read) == 3, read  # not the whole chain
    read.clear()
    assert recent_ranges(instance, NAME, reach=Lsn.ZERO) == ranges  # before it all: all of it
    assert sum(read) == len(ranges)


def test_retiring_records_the_end_and_reads_stop_there(
    counted: tuple[DagsterInstance, list[int]],
) -> None:
    instance, read = counted
    ranges = _chain(3 * PAGE)
    instance.add_dynamic_partitions(NAME, [r.key for r in ranges])
    assert retired_through(instance, NAME) is None
    retire(instance, NAME, ranges[:PAGE])
    assert retired_through(instance, NAME) == ranges[PAGE - 1].hi == ranges[PAGE].lo
    assert not instance.has_dynamic_partition(NAME, ranges[0].key)
    read.clear()
    # a reach below the retired end stops at the first kept range, not after every key
    assert recent_ranges(instance, NAME, reach=ranges[0].lo) == ranges[PAGE:]
    assert len(read) == 2, read
    retire(instance, NAME, [])  # nothing to do
    assert retired_through(instance, NAME) == ranges[PAGE].lo
