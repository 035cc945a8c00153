"""The Delta IO manager in real runs: single partitions, several partitions in one load,
unpartitioned assets, the ``current`` layout, a pinned Delta version, properties and Delta
operation metrics turned into metadata, and a refused commit that leaves the previous version
readable."""

from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetExecutionContext,
    AssetIn,
    DagsterInstance,
    StaticPartitionsDefinition,
    asset,
    materialize,
)
from dagster_pyspark import LazyPySparkResource
from pyspark.sql import DataFrame, SparkSession

from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG
from cdc_assets.dagster.sync.io_manager import (
    CURRENT_LAYOUT,
    DELTA_VERSION,
    LAYOUT,
    AssetWrite,
    SparkDeltaIOManager,
)
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.store_writes import FrameWrite

PARTS = StaticPartitionsDefinition(["a", "b", "c"])
REFUSE: dict[str, bool] = {"now": False}


def _frame(spark: SparkSession, part: str, n: int) -> DataFrame:
    return spark.createDataFrame([(part, i) for i in range(n)], "part string, i int")


@asset(partitions_def=PARTS, io_manager_key="io", required_resource_keys={"pyspark"})
def numbers(context: AssetExecutionContext) -> AssetWrite:
    spark = context.resources.pyspark.spark_session
    part = context.partition_key
    size = {"a": 3, "b": 5, "c": 7}[part]

    def summarize(written: DataFrame) -> dict[str, Any]:
        if REFUSE["now"]:
            raise RuntimeError("refused: the written data failed validation")
        return {"rows": written.count(), "part": part}

    written = FrameWrite(_frame(spark, part, size), summarize)
    return AssetWrite(written, lambda p: {"rows": p["rows"]})


@asset(ins={"numbers": AssetIn()}, io_manager_key="io")
def total(numbers: DataFrame) -> DataFrame:  # every partition in one load
    return numbers.groupBy("part").count()


@asset(partitions_def=PARTS, ins={"numbers": AssetIn()}, io_manager_key="io")
def doubled(numbers: DataFrame) -> DataFrame:  # the same partition
    return numbers.selectExpr("part", "i * 2 AS i")


@asset(
    partitions_def=PARTS,
    io_manager_key="io",
    metadata={LAYOUT: CURRENT_LAYOUT},
    required_resource_keys={"pyspark"},
)
def state(context: AssetExecutionContext) -> DataFrame:  # one location for all partitions
    return _frame(context.resources.pyspark.spark_session, context.partition_key, 1)


@asset(ins={"state": AssetIn(metadata={DELTA_VERSION: 0})}, io_manager_key="io")
def first_state(state: DataFrame) -> DataFrame:  # the state as its first commit left it
    return state


@pytest.fixture
def resources(tmp_path: Path, spark: SparkSession) -> dict[str, Any]:
    pyspark = LazyPySparkResource(spark_config={"spark.master": "local[2]"})
    return {
        "pyspark": pyspark,
        "io": SparkDeltaIOManager(base_path=str(tmp_path), pyspark=pyspark),
    }


def test_partitions_loads_and_layouts(
    tmp_path: Path, spark: SparkSession, resources: dict[str, Any]
) -> None:
    instance = DagsterInstance.ephemeral()
    for part in PARTS.get_partition_keys():
        result = materialize(
            [numbers, doubled, state],
            partition_key=part,
            resources=resources,
            instance=instance,
            run_config=QUIET_RUN_CONFIG,
        )
        assert result.success
        metadata = result.asset_materializations_for_node("numbers")[0].metadata
        assert metadata["rows"].value == {"a": 3, "b": 5, "c": 7}[part]
        assert str(metadata["dagster/uri"].value) == str(tmp_path / "numbers")
        assert metadata["delta_version"].value == PARTS.get_partition_keys().index(part)
        assert metadata["delta/numOutputRows"].value == metadata["rows"].value + 1  # + properties
    store = AssetStore(tmp_path)
    assert store.read(spark, ["doubled"], "c").where("i % 2 = 1").count() == 0
    assert store.read(spark, ["doubled"], "b").count() == 5
    # The current layout: one location, the last partition's state.
    assert [r.part for r in store.read(spark, ["state"], None).collect()] == ["c"]
    assert not (tmp_path / "state" / "a").exists()

    result = materialize(
        [numbers, total, state, first_state],
        selection=[total, first_state],
        resources=resources,
        instance=instance,
        run_config=QUIET_RUN_CONFIG,
    )
    assert result.success
    counts = {r.part: r["count"] for r in store.read(spark, ["total"], None).collect()}
    assert counts == {"a": 3, "b": 5, "c": 7}
    assert [r.part for r in store.read(spark, ["first_state"], None).collect()] == ["a"]


def test_refused_publication_keeps_the_previous_version(
    tmp_path: Path, spark: SparkSession, resources: dict[str, Any]
) -> None:
    instance = DagsterInstance.ephemeral()
    store = AssetStore(tmp_path)
    assert materialize(
        [numbers],
        partition_key="a",
        resources=resources,
        instance=instance,
        run_config=QUIET_RUN_CONFIG,
    ).success
    first = store.current_version(["numbers"], "a")
    commits = len(store.history(["numbers"]))
    REFUSE["now"] = True
    try:
        result = materialize(
            [numbers],
            partition_key="a",
            resources=resources,
            instance=instance,
            run_config=QUIET_RUN_CONFIG,
            raise_on_error=False,
        )
    finally:
        REFUSE["now"] = False
    assert not result.success
    assert store.current_version(["numbers"], "a") == first
    assert first is not None
    assert len(store.history(["numbers"])) == commits, "the refused write made a commit"
    assert store.read(spark, ["numbers"], "a").count() == 3
    properties = store.properties(["numbers"], "a") or {}
    assert {k: properties[k] for k in ("rows", "part")} == {"rows": 3, "part": "a"}
