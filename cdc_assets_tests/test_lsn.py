"""Property tests for the LSN value types: round trips, ordering, increment, range keys."""

from __future__ import annotations

import itertools
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_assets.lsn import CHANGE_ORDER, Lsn, LsnError, LsnRange, change_order

lsns = st.binary(min_size=10, max_size=10).map(Lsn)
ints = st.integers(min_value=0, max_value=(1 << 80) - 1)


@given(lsns)
def test_every_textual_form_round_trips(lsn: Lsn) -> None:
    assert Lsn.from_bytes(lsn.raw) == lsn
    assert Lsn.from_hex(lsn.hex) == lsn
    assert Lsn.parse(lsn.hex) == lsn
    assert Lsn.parse(lsn.key) == lsn
    assert Lsn.parse(lsn.parts()) == lsn
    assert Lsn.from_int(int(lsn)) == lsn
    assert len(lsn.key) == 20 and lsn.key == lsn.key.lower()


@given(lsns)
def test_numeric_form_round_trips(lsn: Lsn) -> None:
    # numeric(25,0) holds vlf*10^15 + block*10^5 + slot: a 4-byte block (< 10^10) and a
    # 2-byte slot (< 10^5) always fit their decimal fields.
    assert Lsn.from_numeric(lsn.numeric) == lsn


def test_numeric_form_matches_sql_server_example() -> None:
    # 00000014:00000061:0001 is printed by SQL Server as 20000000009700001.
    assert Lsn.from_numeric(Decimal("20000000009700001")) == Lsn.parse("14:61:1")


@given(lsns, lsns)
def test_order_is_unsigned_byte_order_and_key_order(a: Lsn, b: Lsn) -> None:
    assert (a < b) == (int(a) < int(b)) == (a.key < b.key)
    assert (a == b) == (a.raw == b.raw)


@given(ints.filter(lambda n: n < (1 << 80) - 1))
def test_increment_then_decrement(n: int) -> None:
    lsn = Lsn.from_int(n)
    assert lsn.increment() > lsn
    assert lsn.increment().decrement() == lsn
    assert int(lsn.increment()) == n + 1


def test_increment_carries_across_slot_and_block() -> None:
    assert Lsn.parse("2a:1b8:ffff").increment() == Lsn.parse("2a:1b9:0")
    with pytest.raises(LsnError):
        Lsn.MAX.increment()


@pytest.mark.parametrize("bad", [b"", b"\x00" * 9, b"\x00" * 11])
def test_wrong_length_is_refused(bad: bytes) -> None:
    with pytest.raises(LsnError, match="exactly 10 bytes"):
        Lsn(bad)


@pytest.mark.parametrize("bad", ["", "0x12", "zz" * 10, "1:2", "0x" + "0" * 21])
def test_bad_text_is_refused_with_the_expected_forms(bad: str) -> None:
    with pytest.raises(LsnError, match="expected an LSN"):
        Lsn.parse(bad)


@given(lsns, lsns)
def test_range_key_round_trips_and_sorts(a: Lsn, b: Lsn) -> None:
    if a == b:
        with pytest.raises(LsnError):
            LsnRange(a, b)
        return
    lo, hi = min(a, b), max(a, b)
    rng = LsnRange(lo, hi)
    assert LsnRange.parse_key(rng.key) == rng
    assert LsnRange.is_key(rng.key)
    assert hi in rng and lo not in rng and rng.first in rng


@given(st.lists(lsns, min_size=3, max_size=12, unique=True))
def test_a_chain_of_ranges_is_contiguous_and_key_sorted(points: list[Lsn]) -> None:
    points.sort()
    chain = [LsnRange(lo, hi) for lo, hi in itertools.pairwise(points)]
    assert sorted(r.key for r in chain) == [r.key for r in chain]
    assert all(b.follows(a) for a, b in itertools.pairwise(chain))


@pytest.mark.parametrize(
    "key",
    [
        "snapshot",
        "0000002a000001b80003",
        "0000002A000001B80003-0000002a000001c00001",  # upper case
        "0000002a000001c00001-0000002a000001b80003",  # lo > hi
        "0000002a000001b80003-0000002a000001b80003",  # empty
        "0000002a000001b80003-0000002a000001c0000",  # short
        "0000002a000001b80003--0000002a000001c00001",
    ],
)
def test_bad_partition_keys_are_refused_clearly(key: str) -> None:
    assert not LsnRange.is_key(key)
    with pytest.raises(LsnError, match=r"lo|range"):
        LsnRange.parse_key(key)


def test_change_rows_are_ordered_as_sql_server_orders_them() -> None:
    assert CHANGE_ORDER == ("__$start_lsn", "__$command_id", "__$seqval", "__$operation")
    assert change_order(lambda c: f"t.[{c}]") == (
        "t.[__$start_lsn], t.[__$command_id], t.[__$seqval], t.[__$operation]"
    )
    assert change_order(str, descending=True) == (
        "__$start_lsn DESC, __$command_id DESC, __$seqval DESC, __$operation DESC"
    )
