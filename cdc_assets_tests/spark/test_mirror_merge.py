"""The Spark mirror merge equals the plain-Python replay, for random change streams."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from cdc_assets.spark.mirror_merge import (
    last_change_per_key,
    last_change_per_key_in_driver,
    rows_after_keyed_changes,
    rows_after_multiset_changes,
)
from cdc_assets_tests.support.replay import replay_keyed, replay_multiset

DATA = StructType([StructField("k", IntegerType(), False), StructField("v", StringType(), True)])
CHANGES = StructType(
    [
        StructField("__$start_lsn", BinaryType(), False),
        StructField("__$command_id", IntegerType(), False),
        StructField("__$seqval", BinaryType(), False),
        StructField("__$operation", IntegerType(), False),
        *DATA.fields,
    ]
)


def lsn(n: int) -> bytes:
    return n.to_bytes(10, "big")


def random_history(rng: random.Random, transactions: int) -> tuple[dict[int, str | None], list]:
    """A valid keyed change stream: (start_lsn, command_id, seqval, op, k, v) rows, shuffled."""
    state: dict[int, str | None] = {k: f"s{k}" for k in rng.sample(range(40), 15)}
    snapshot = dict(state)
    rows: list[tuple[Any, ...]] = []
    seq = 0
    for t in range(1, transactions + 1):
        command = 0
        for _ in range(rng.randint(1, 4)):
            seq += 1
            command += 1
            op = rng.choice(["ins", "upd", "del", "rekey", "reinsert"] if state else ["ins"])
            free = [k for k in range(60) if k not in state]
            if op == "ins" and free:
                k = rng.choice(free)
                state[k] = rng.choice([None, f"i{t}"])
                rows.append((lsn(t), command, lsn(seq), 2, k, state[k]))
            elif op == "upd" and state:
                k = rng.choice(sorted(state))
                rows.append((lsn(t), command, lsn(seq), 3, k, state[k]))
                state[k] = f"u{t}"
                rows.append((lsn(t), command, lsn(seq), 4, k, state[k]))
            elif op in ("del", "reinsert") and state:
                k = rng.choice(sorted(state))
                rows.append((lsn(t), command, lsn(seq), 1, k, state.pop(k)))
                if op == "reinsert":
                    seq += 1
                    command += 1  # the re-insert is the transaction's next statement
                    state[k] = f"r{t}"
                    rows.append((lsn(t), command, lsn(seq), 2, k, state[k]))
            elif op == "rekey" and state and free:
                old, new = rng.choice(sorted(state)), rng.choice(free)
                rows.append((lsn(t), command, lsn(seq), 1, old, state[old]))
                seq += 1
                state[new] = state.pop(old)
                rows.append((lsn(t), command, lsn(seq), 2, new, state[new]))
    rng.shuffle(rows)  # the merge must use the order columns, not the row order
    return snapshot, rows


def as_dicts(rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    return [dict(zip(CHANGES.fieldNames(), r, strict=True)) for r in rows]


@pytest.mark.parametrize("seed", range(6))
def test_keyed_merge_equals_replay(spark: SparkSession, seed: int) -> None:
    rng = random.Random(seed)
    snapshot, rows = random_history(rng, transactions=rng.randint(5, 40))
    mirror = spark.createDataFrame(sorted(snapshot.items()), DATA)
    changes = spark.createDataFrame(rows, CHANGES)

    merged = rows_after_keyed_changes(mirror, changes, key_columns=["k"])

    expected = replay_keyed(snapshot.items(), as_dicts(rows), ["k", "v"], ["k"])
    assert sorted(tuple(r) for r in merged.collect()) == sorted(expected.values())


@pytest.mark.parametrize("seed", range(6))
def test_last_change_per_key_in_the_driver_equals_spark(spark: SparkSession, seed: int) -> None:
    """The Arrow rule a small range is merged by (delta-rs, in the driver) picks the same row
    per key as Spark's window, above any snapshot LSN, whatever the row order."""
    rng = random.Random(seed)
    _, rows = random_history(rng, transactions=rng.randint(5, 40))
    above = rng.choice([None, lsn(rng.randint(1, 5))])
    in_spark = last_change_per_key(spark.createDataFrame(rows, CHANGES), ["k"], above)
    arrow = pa.Table.from_pylist(as_dicts(rows), schema=to_arrow_schema(CHANGES))
    in_driver = last_change_per_key_in_driver(arrow, ["k"], above)
    expected = sorted(tuple(r) for r in in_spark.collect())
    assert sorted(tuple(r.values()) for r in in_driver.to_pylist()) == expected
    assert in_driver.schema == arrow.schema


def test_keyed_merge_in_two_steps_equals_one_step(spark: SparkSession) -> None:
    rng = random.Random(99)
    snapshot, rows = random_history(rng, transactions=30)
    mirror = spark.createDataFrame(sorted(snapshot.items()), DATA)
    early = [r for r in rows if r[0] <= lsn(15)]
    late = [r for r in rows if r[0] > lsn(15)]

    stepwise = rows_after_keyed_changes(
        rows_after_keyed_changes(mirror, spark.createDataFrame(early, CHANGES), key_columns=["k"]),
        spark.createDataFrame(late, CHANGES),
        key_columns=["k"],
    )
    at_once = rows_after_keyed_changes(
        mirror, spark.createDataFrame(rows, CHANGES), key_columns=["k"]
    )
    assert sorted(map(tuple, stepwise.collect())) == sorted(map(tuple, at_once.collect()))


def test_changes_at_or_below_the_snapshot_lsn_are_ignored(spark: SparkSession) -> None:
    mirror = spark.createDataFrame([(1, "snap")], DATA)
    changes = spark.createDataFrame(
        [(lsn(5), 1, lsn(1), 1, 1, "snap"), (lsn(7), 1, lsn(2), 2, 2, "new")], CHANGES
    )
    merged = rows_after_keyed_changes(mirror, changes, key_columns=["k"], snapshot_lsn=lsn(5))
    assert sorted(map(tuple, merged.collect())) == [(1, "snap"), (2, "new")]


def test_replaying_an_overlapping_window_is_idempotent(spark: SparkSession) -> None:
    """The fuzzy snapshot rule: rows already at a later state, then (L0, L1] replayed on them."""
    rng = random.Random(5)
    snapshot, rows = random_history(rng, transactions=20)
    final = replay_keyed(snapshot.items(), as_dicts(rows), ["k", "v"], ["k"])
    already_current = spark.createDataFrame(sorted(final.values()), DATA)
    merged = rows_after_keyed_changes(
        already_current, spark.createDataFrame(rows, CHANGES), key_columns=["k"]
    )
    assert sorted(map(tuple, merged.collect())) == sorted(final.values())


@pytest.mark.parametrize("seed", range(3))
def test_multiset_merge_equals_replay(spark: SparkSession, seed: int) -> None:
    rng = random.Random(seed)
    bag: Counter[tuple[int, str | None]] = Counter(
        (rng.randint(0, 3), rng.choice(["a", None])) for _ in range(12)
    )
    snapshot = list(bag.elements())
    rows = []
    for t in range(1, 25):
        seq = t
        if bag and rng.random() < 0.5:
            row = rng.choice(sorted(bag, key=repr))
            bag[row] -= 1
            bag += Counter()
            op = rng.choice([1, 3])
            rows.append((lsn(t), 1, lsn(seq), op, *row))
            if op == 3:
                new = (row[0], "u")
                bag[new] += 1
                rows.append((lsn(t), 1, lsn(seq), 4, *new))
        else:
            row = (rng.randint(0, 3), rng.choice(["a", None]))
            bag[row] += 1
            rows.append((lsn(t), 1, lsn(seq), 2, *row))
    mirror = spark.createDataFrame(snapshot, DATA)
    merged = rows_after_multiset_changes(mirror, spark.createDataFrame(rows, CHANGES))
    expected = replay_multiset(snapshot, as_dicts(rows), ["k", "v"])
    assert Counter(map(tuple, merged.collect())) == expected


def test_multiset_merge_refuses_to_remove_a_row_the_mirror_lacks(spark: SparkSession) -> None:
    mirror = spark.createDataFrame([(1, "a")], DATA)
    changes = spark.createDataFrame([(lsn(1), 1, lsn(1), 1, 2, "b")], CHANGES)
    with pytest.raises(Exception, match="does not hold"):
        rows_after_multiset_changes(mirror, changes).collect()
