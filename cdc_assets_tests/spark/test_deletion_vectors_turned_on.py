"""A keyless mirror created small, by delta-rs, gets deletion vectors from the driver before its
first driver merge: the commit Spark's ``ALTER TABLE ... SET TBLPROPERTIES`` makes, with no
Spark job (it cost a range run five Spark jobs, seconds under ``make demo``)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdc_assets.spark.deletion_vector_commits import deletion_vectors_turned_on
from cdc_assets_tests.support.outside_spark import read_with_duckdb, read_with_query_builder

ROWS = pa.table(
    {
        "id": pa.array(range(20), pa.int64()),
        "name": pa.array([f"row {i}" if i % 3 else None for i in range(20)]),
        "at": pa.array([dt.datetime(2024, 1, 1, 0, i) for i in range(20)], pa.timestamp("us")),
    }
)
CDF = {"delta.enableChangeDataFeed": "true"}


def _features(path: Path) -> tuple:
    table = DeltaTable(str(path))
    protocol = table.protocol()
    return (
        protocol.min_reader_version,
        protocol.min_writer_version,
        set(protocol.reader_features or []),
        set(protocol.writer_features or []),
        table.metadata().configuration,
    )


@pytest.mark.parametrize(
    "columns",
    [
        ["id", "name", "at"],  # timestamp_ntz: table features (reader 3, writer 7)
        ["id", "name"],  # a legacy protocol (reader 1, writer 4)
    ],
)
def test_the_driver_s_commit_is_spark_s_alter_table(
    spark: SparkSession, tmp_path: Path, columns: list[str]
) -> None:
    rows = ROWS.select(columns)
    driver, twin = tmp_path / "driver", tmp_path / "spark"
    for path in (driver, twin):  # as the driver creates a small mirror (driver_writes)
        write_deltalake(str(path), rows, configuration=CDF)
    before = _features(driver)
    assert before[4].get("delta.enableDeletionVectors") is None

    assert deletion_vectors_turned_on(driver)
    spark.sql(
        f"ALTER TABLE delta.`{twin}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    assert _features(driver) == _features(twin), (before, _features(twin))
    assert DeltaTable(str(driver)).version() == 1
    assert deletion_vectors_turned_on(driver)  # on already: nothing more committed
    assert DeltaTable(str(driver)).version() == 1

    # Spark writes deletion vectors into it, and every reader reads them
    spark.sql(f"DELETE FROM delta.`{driver}` WHERE id % 4 = 0")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{driver}`").orderBy("version").collect()
    assert history[-1]["operation"] == "DELETE"
    assert int(history[-1]["operationMetrics"]["numDeletionVectorsAdded"]) > 0
    commit = json.loads((driver / "_delta_log" / f"{1:020d}.json").read_text().splitlines()[0])
    assert commit["commitInfo"]["operation"] == "SET TBLPROPERTIES"
    expected = [tuple(r.values()) for r in rows.to_pylist() if r["id"] % 4]
    columns = rows.column_names
    by_id = sorted  # ids are unique and first: tuples sort by them
    spark_rows = spark.read.format("delta").load(str(driver)).collect()
    assert by_id(tuple(r) for r in spark_rows) == expected
    assert by_id(read_with_duckdb(str(driver), columns)) == expected
    assert by_id(read_with_query_builder(str(driver), columns)) == expected


def test_a_log_the_driver_cannot_write_is_left_to_spark(tmp_path: Path) -> None:
    path = tmp_path / "appendonly"
    write_deltalake(
        str(path), ROWS.drop_columns(["at"]), configuration={"delta.appendOnly": "true"}
    )
    assert not deletion_vectors_turned_on(path)
    assert DeltaTable(str(path)).version() == 0
    assert not deletion_vectors_turned_on(tmp_path / "no table")
