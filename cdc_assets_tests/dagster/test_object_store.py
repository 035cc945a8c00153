"""Storage on an object store: an S3-compatible server (moto's, on loopback) behind ``s3a://``
with hadoop-aws, credentials from the environment. The snapshot, ranges raced by a random
workload, the sensor's reads (delta-rs, without Spark) and its lock all work there, the writers'
compaction is Spark's OPTIMIZE there, and every mirror ends equal to its source."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from dagster import DagsterInstance
from pyspark.sql import SparkSession

from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION
from cdc_assets.spark import compaction, small_files
from cdc_assets.workload import Workload
from cdc_assets_tests.support.net import free_port

from .conftest import make_harness

BUCKET = "cdc-assets-tests"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture
def s3(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A bucket on a moto server at 127.0.0.1; Spark's S3A and delta-rs pointed at it. The
    server runs in a process of its own: delta-rs holds the GIL while it waits for an answer, so
    a server thread in this process could never answer it."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the moto server did not start"
                time.sleep(0.2)
        for name, value in {
            **KEYS,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
        }.items():
            monkeypatch.setenv(name, value)
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(
            Bucket=BUCKET
        )
        hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        for key, value in {
            "fs.s3a.endpoint": endpoint,
            "fs.s3a.endpoint.region": "us-east-1",
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": KEYS["AWS_ACCESS_KEY_ID"],
            "fs.s3a.secret.key": KEYS["AWS_SECRET_ACCESS_KEY"],
            "fs.s3a.impl.disable.cache": "true",  # each test's server is new
        }.items():
            hadoop.set(key, value)
        yield f"s3a://{BUCKET}/storage"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_snapshot_ranges_and_random_workload_on_s3(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    s3: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    harness = make_harness(tmp_path, spark, instance, rows=15, max_transactions=8, storage=s3)
    assert harness.sync() >= 1  # the snapshot
    for table in harness.source.tables:
        assert harness.source.store.is_published(table.change_log_key.path, SNAPSHOT_PARTITION)
    harness.sync_racing_writes(rounds=1, steps=10, seed=5, max_pause=0.0)
    harness.capture()
    assert harness.sync() >= 1
    harness.assert_mirrors_equal_source()
    # the writers' compaction is Spark's OPTIMIZE there: files packed, the same rows
    monkeypatch.setattr(small_files, "FANOUT", 2)
    store = harness.source.store
    # the change log and the mirror with the most files (the writers compacted as they went,
    # with the default FANOUT: a quiet table's may be one file already, nothing to compact)
    for keys in (
        [tuple(t.change_log_key.path) for t in harness.source.tables],
        [tuple(t.mirror_key.path) for t in harness.source.tables],
    ):
        files = {key: len(store.delta_table(key).file_uris()) for key in keys}
        key = max(keys, key=files.__getitem__)
        before = files[key]
        assert before >= 2, f"no table with small files to compact: {files}"
        done = compaction.compact_after_commit(spark, store, key)
        assert done is not None and done.how == "spark", (key, before)
        assert len(store.delta_table(key).file_uris()) < before
    harness.assert_mirrors_equal_source()
    # a range after it, read from and merged into the packed files; the harness's workload
    # model starts again from the tables (the racing writes changed rows it knows)
    workload = harness.workload
    harness.workload = Workload(workload.conn, seed=6, tables=workload.tables)
    harness.next_range(4)
    harness.assert_mirrors_equal_source()
    # nothing of the storage went to the local disk
    assert not (tmp_path / "storage").exists()
    objects = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix="storage/mirror/")
    assert any("_delta_log" in o["Key"] for o in objects.get("Contents", []))
