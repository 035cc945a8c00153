"""Warm Spark: the sync through a Spark Connect server started from the pyspark distribution
(:mod:`cdc_assets.spark.connect_server`), as ``make demo`` runs it: the snapshot and range runs
attach to the server (``spark.remote``) instead of starting a driver, and the mirrors equal the
source; and the runs attached to one server share its cores. The clients run in subprocesses
(:mod:`.connect_runner`, :mod:`.sharing_runner`): this process holds a classic session already."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION
from cdc_assets.lsn import LsnRange
from cdc_assets_tests.support.spark_connect import ConnectServer, connect_server_for

from . import connect_runner, sharing_runner

ROOT = Path(__file__).resolve().parents[2]


def _run_client(
    tmp_path: Path, runner: ModuleType, *args: str
) -> tuple[dict[str, Any], ConnectServer]:
    """Start a server, run ``runner`` (a client module) in a process of its own with ``args``
    and the server's URL, stop the server; the runner's ``RESULT`` line, and the server."""
    with connect_server_for(tmp_path) as server:
        return run_client(server, runner, *args), server


def run_client(server: ConnectServer, runner: ModuleType, *args: str) -> dict[str, Any]:
    """Run ``runner`` in a process of its own with ``args`` and ``server``'s URL; its
    ``RESULT`` line."""
    done = subprocess.run(
        [sys.executable, "-m", runner.__name__, *args, server.url],
        cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith(runner.RESULT_PREFIX)]
    assert done.returncode == 0 and lines, (
        f"runner failed ({done.returncode}):\n{done.stderr[-3000:]}\n--- server log:\n"
        f"{server.log_tail()}"
    )
    return json.loads(lines[-1][len(runner.RESULT_PREFIX) :])


def test_snapshot_and_ranges_through_a_spark_connect_server(tmp_path: Path) -> None:
    result, server = _run_client(tmp_path, connect_runner, str(tmp_path))
    assert result["session"] == "pyspark.sql.connect.session.SparkSession", result
    partitions = result["partitions"]
    assert partitions[0] == SNAPSHOT_PARTITION, partitions
    ranges = [LsnRange.parse_key(p) for p in partitions[1:]]
    assert len(ranges) >= 2, partitions
    assert all(b.lo == a.hi for a, b in itertools.pairwise(ranges)), partitions
    assert result["mirror_lsn"] == ranges[-1].hi.hex
    assert server.process.returncode is not None  # stopped with its process group


def test_a_small_job_runs_beside_a_long_job_of_another_session(tmp_path: Path) -> None:
    """The server schedules its sessions' jobs fairly: a range run's small job does not wait
    behind every task of a long job another run started first (a maintenance VACUUM, a
    snapshot), as it would first in, first out (Spark's default)."""
    ended, _server = _run_client(tmp_path, sharing_runner)
    # first in, first out: the small job's tasks start once the long job's last ones have, and
    # it ends with it (measured 10 s after it started); shared, within a second or two of it
    long_alone = sharing_runner.LONG_TASKS * sharing_runner.TASK_MS / 1000 / 2
    assert ended["small"] < ended["long"] - long_alone / 3, ended
