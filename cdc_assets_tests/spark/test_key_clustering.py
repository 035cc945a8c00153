"""Large mirrors clustered by key: the rebuild writes files of narrow key ranges, and a MERGE of a
few changes reads only the files that hold their keys (shown by deleting the other files: the
MERGE still succeeds, while one without the key condition fails), with the same result as the
reference merge — for integer, text (quotes and backslashes) and composite keys, as a list of
keys and as a range."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import shutil
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from cdc_assets.lsn import Lsn
from cdc_assets.spark import key_clustering, mirror_store, spark_merges
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.key_clustering import sql_literal, target_key_condition
from cdc_assets.spark.mirror_merge import rows_after_keyed_changes
from cdc_assets_tests.spark.change_rows import change_rows, lsn, sorted_rows

ROWS = 600
PER_FILE = 50


def _files(uri: str, column: str) -> list[tuple[str, object, object]]:
    """(path, min, max of ``column``) of every file of the Delta table's current version."""
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True)).to_pylist()
    return [(a["path"], a[f"min.{column}"], a[f"max.{column}"]) for a in actions]


@pytest.fixture
def small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_clustering, "ROWS_PER_FILE", PER_FILE)


@pytest.fixture(params=[False, True], ids=["key list", "key range"])
def many(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the MERGE's key condition is a range (more changed keys than a list takes)."""
    if request.param:
        monkeypatch.setattr(key_clustering, "KEY_LIST_MAX", 1)
    return bool(request.param)


def _rebuild(spark: SparkSession, store: AssetStore, base: DataFrame, keys: list[str]) -> str:
    key = ["mirror", "t"]
    mirror_store.rebuild(
        spark, store, key, base, {"lsn": Lsn.from_int(10).hex}, ROWS, key_columns=keys
    )
    return store.location(key)


def _merge(
    spark: SparkSession,
    store: AssetStore,
    changes: DataFrame,
    keys: list[str],
    target_rows: int | None,
) -> None:
    spark_merges.spark_merge_keyed(
        spark,
        store,
        ["mirror", "t"],
        changes,
        key_columns=keys,
        snapshot_lsn=bytes(lsn(10)),
        properties={"lsn": Lsn.from_int(20).hex},
        target_rows=target_rows,
    )


def test_a_few_changes_read_only_the_files_of_their_keys(
    spark: SparkSession, tmp_path: Path, small_files: None
) -> None:
    ids = list(range(ROWS))
    random.Random(7).shuffle(ids)  # the snapshot arrives in no key order
    base = spark.createDataFrame([(i, f"v{i}") for i in ids], "id int, v string")
    store = AssetStore(tmp_path)
    uri = _rebuild(spark, store, base, ["id"])
    files = sorted(_files(uri, "id"), key=lambda f: int(f[1]))  # type: ignore[call-overload]
    assert len(files) >= ROWS // PER_FILE
    # each file one key range, none overlapping the next
    assert all(a[2] < b[1] for a, b in itertools.pairwise(files)), files
    changes = change_rows(
        spark,
        [(11, 1, 4, 5, "x5"), (11, 2, 1, 333, "v333"), (12, 1, 2, 10_000, "new")],
        "id int, v string",
    )
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=["id"], snapshot_lsn=lsn(10))
    )
    touched = {path for path, low, high in files if any(low <= k <= high for k in (5, 333))}
    aside = tmp_path / "aside"
    _move_aside_all_but(uri, files, touched, aside)
    # without the key condition the MERGE reads every file, and misses the ones moved aside
    with pytest.raises(Exception, match=r"(?i)not.?found|does not exist|FileNotFound"):
        _merge(spark, store, changes, ["id"], None)
    _merge(spark, store, changes, ["id"], ROWS)  # reads only the files holding 5 and 333
    _move_back(uri, aside)
    assert sorted_rows(store.read(spark, ["mirror", "t"], None)) == expected


def _move_aside_all_but(
    uri: str, files: list[tuple[str, object, object]], keep: set[str], aside: Path
) -> None:
    aside.mkdir()
    for path, _, _ in files:
        if path not in keep:
            shutil.move(Path(uri) / path, aside / path)


def _move_back(uri: str, aside: Path) -> None:
    for moved in aside.iterdir():
        shutil.move(moved, Path(uri) / moved.name)


def test_decimal_keys_read_only_the_files_of_their_keys(
    spark: SparkSession,
    tmp_path: Path,
    small_files: None,
    many: bool,
) -> None:
    """numeric(18,0) identity keys are common in older SQL Server schemas: their MERGE skips
    files as an integer key's does, as a list of keys and as a range."""
    data = "id decimal(18,2), v string"
    base = spark.createDataFrame([(Decimal(i) / 4, f"v{i}") for i in range(ROWS)], data)
    store = AssetStore(tmp_path)
    uri = _rebuild(spark, store, base, ["id"])
    files = _files(uri, "id")
    assert len(files) >= ROWS // PER_FILE
    keys = [Decimal("50.25"), Decimal("52.50")]
    changes = change_rows(spark, [(11, 1, 4, keys[0], "x"), (11, 2, 1, keys[1], "gone")], data)
    condition = target_key_condition(changes, ["id"])
    assert condition is not None and ("BETWEEN" in condition) == many, condition
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=["id"], snapshot_lsn=lsn(10))
    )
    touched = {
        path
        for path, low, high in files
        if any(Decimal(str(low)) <= k <= Decimal(str(high)) for k in keys)
    }
    assert len(touched) < len(files) / 2, (touched, files)
    aside = tmp_path / "aside"
    _move_aside_all_but(uri, files, touched, aside)
    try:
        with pytest.raises(Exception, match=r"(?i)not.?found|does not exist|FileNotFound"):
            _merge(spark, store, changes, ["id"], None)  # no key condition: reads every file
        _merge(spark, store, changes, ["id"], ROWS)  # fails if it reads a file moved aside
    finally:
        _move_back(uri, aside)
    assert sorted_rows(store.read(spark, ["mirror", "t"], None)) == expected


def test_text_and_composite_keys_merge_like_the_reference(
    spark: SparkSession, tmp_path: Path, small_files: None
) -> None:
    names = ["o'brien", "back\\slash", "plain", "ünï", "a\\'b"]
    rows = [(names[i % len(names)] + str(i // len(names)), i % 3, i) for i in range(ROWS)]
    data = "name string, part int, n int"
    base = spark.createDataFrame(rows, data)
    store = AssetStore(tmp_path)
    keys = ["name", "part"]
    _rebuild(spark, store, base, keys)
    changes = change_rows(
        spark,
        [
            (11, 1, 4, "o'brien0", 0, -1),  # update
            (11, 2, 1, "back\\slash0", 1, 1),  # delete
            (12, 1, 2, "a\\'b0", 9, 99),  # insert: a new (name, part)
            (12, 2, 4, "ünï0", 2, -2),
        ],
        data,
    )
    source = changes.select("name")
    condition = target_key_condition(source, ["name"])
    assert condition is not None and condition.startswith("(t.`name` = ")
    assert "t.`name` = 'o\\'brien0' OR" in condition and "'back\\\\slash0'" in condition
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=keys, snapshot_lsn=lsn(10))
    )
    _merge(spark, store, changes, keys, ROWS)
    assert sorted_rows(store.read(spark, ["mirror", "t"], None)) == expected


def test_a_later_key_column_prunes_the_files_of_a_first_one_with_few_values(
    spark: SparkSession,
    tmp_path: Path,
    small_files: None,
    monkeypatch: pytest.MonkeyPatch,
    many: bool,
) -> None:
    """Keys (tenant, id) with two tenants: every file of a tenant holds the same first value, so
    only the condition on ``id`` keeps the MERGE to the files of the changed keys."""
    data = "tenant string, id long, v string"
    base = spark.createDataFrame([(f"t{i % 2}", i, f"v{i}") for i in range(ROWS)], data)
    store = AssetStore(tmp_path)
    keys = ["tenant", "id"]
    uri = _rebuild(spark, store, base, keys)
    files = _files(uri, "id")
    changes = change_rows(spark, [(11, 1, 4, "t1", 201, "x"), (11, 2, 1, "t1", 203, "gone")], data)
    condition = target_key_condition(changes, keys)
    expected_id = "t.`id` BETWEEN 201L AND 203L" if many else "(t.`id` = 201L OR t.`id` = 203L)"
    assert condition is not None and condition.endswith(f" AND {expected_id}"), condition
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=keys, snapshot_lsn=lsn(10))
    )
    touched = {path for path, low, high in files if low <= 203 and high >= 201}
    of_tenant = {p for p, low, high in _files(uri, "tenant") if low <= "t1" <= high}
    assert len(touched) < len(of_tenant) / 2, (touched, of_tenant)
    aside = tmp_path / "aside"
    _move_aside_all_but(uri, files, touched, aside)
    try:
        with monkeypatch.context() as patch:  # the first key column's condition alone
            patch.setattr(
                spark_merges,
                "target_key_condition",
                lambda source, columns: target_key_condition(source, columns[:1]),
            )
            with pytest.raises(Exception, match=r"(?i)not.?found|does not exist|FileNotFound"):
                _merge(spark, store, changes, keys, ROWS)
        _merge(spark, store, changes, keys, ROWS)  # fails if it reads a file moved aside
    finally:
        _move_back(uri, aside)
    assert sorted_rows(store.read(spark, ["mirror", "t"], None)) == expected


def test_many_changed_keys_use_a_range(
    spark: SparkSession, tmp_path: Path, small_files: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(key_clustering, "KEY_LIST_MAX", 3)
    base = spark.createDataFrame([(i, f"v{i}") for i in range(ROWS)], "id long, v string")
    store = AssetStore(tmp_path)
    _rebuild(spark, store, base, ["id"])
    updates = [(11, k, 4, 100 + k, f"u{k}") for k in range(5)]
    changes = change_rows(spark, [*updates, (12, 9, 1, 250, "v250")], "id long, v string")
    assert target_key_condition(changes, ["id"]) == "t.`id` BETWEEN 100L AND 250L"
    expected = sorted_rows(
        rows_after_keyed_changes(base, changes, key_columns=["id"], snapshot_lsn=lsn(10))
    )
    _merge(spark, store, changes, ["id"], ROWS)
    assert sorted_rows(store.read(spark, ["mirror", "t"], None)) == expected


def test_literals_have_the_column_type_or_none() -> None:
    assert sql_literal(5, T.ByteType()) == "5Y"
    assert sql_literal(5, T.ShortType()) == "5S"
    assert sql_literal(5, T.IntegerType()) == "5"
    assert sql_literal(-5, T.LongType()) == "-5L"
    assert sql_literal("it's", T.StringType()) == "'it\\'s'"
    assert sql_literal(dt.date(2024, 2, 29), T.DateType()) == "DATE'2024-02-29'"
    assert (
        sql_literal(dt.datetime(2024, 1, 2, 3, 4, 5, 6), T.TimestampNTZType())
        == "TIMESTAMP_NTZ'2024-01-02 03:04:05.000006'"
    )
    assert sql_literal(b"\x00\xff", T.BinaryType()) == "X'00ff'"
    assert sql_literal(Decimal("-1.5"), T.DecimalType(18, 4)) == "CAST('-1.5' AS DECIMAL(18,4))"
    assert sql_literal(Decimal("1E+3"), T.DecimalType(38, 0)) == "CAST('1000' AS DECIMAL(38,0))"
    # no literal of the column's own type: no condition (the MERGE reads every file)
    assert sql_literal(Decimal("NaN"), T.DecimalType(18, 4)) is None
    assert sql_literal(1.5, T.DoubleType()) is None
    assert sql_literal(None, T.LongType()) is None
