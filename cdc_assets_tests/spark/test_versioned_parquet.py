"""Versioned Parquet publication: readers see whole versions only, crashes leave the old one."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_assets.spark import versioned_parquet as vp


def test_publish_then_read_and_republish(spark: SparkSession, tmp_path: Path) -> None:
    location = tmp_path / "cdc" / "t" / "snapshot"
    assert not vp.is_published(location)
    with pytest.raises(vp.NotPublished):
        vp.read(spark, location)

    vp.publish(spark.createDataFrame([(1, "a")], "k int, v string"), location)
    first = vp.current_version(location)
    assert vp.read(spark, location).collect()[0].asDict() == {"k": 1, "v": "a"}

    vp.publish(spark.createDataFrame([(2, "b"), (3, "c")], "k int, v string"), location)
    assert vp.current_version(location) != first
    assert sorted(r.k for r in vp.read(spark, location).collect()) == [2, 3]
    assert first.exists(), "the previous version stays for readers that resolved it already"

    vp.publish(spark.createDataFrame([(4, "d")], "k int, v string"), location)
    assert not first.exists(), "versions older than the previous one are pruned"


def test_a_crashed_write_leaves_the_published_version(spark: SparkSession, tmp_path: Path) -> None:
    location = tmp_path / "t"
    vp.publish(spark.createDataFrame([(1, "a")], "k int, v string"), location)
    published = vp.current_version(location)
    # A write that died half-way: a version directory with a partial file and no pointer switch.
    crashed = location / "v-99999999999999999999-deadbeef"
    crashed.mkdir()
    (crashed / "part-00000.parquet").write_bytes(b"PAR1 truncated")
    assert vp.current_version(location) == published
    assert [r.k for r in vp.read(spark, location).collect()] == [1]

    vp.publish(spark.createDataFrame([(2, "b")], "k int, v string"), location)
    assert not crashed.exists(), "the next publish removes the leftovers"
    assert [r.k for r in vp.read(spark, location).collect()] == [2]


def test_a_pointer_to_a_missing_version_is_not_published(tmp_path: Path) -> None:
    (tmp_path / vp.POINTER).write_text("v-gone")
    with pytest.raises(vp.NotPublished, match="not a complete version"):
        vp.current_version(tmp_path)
