"""``cdc-assets demo --headless``: the real definitions synced while a workload writes, then every
mirror compared with its source table."""

from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import SparkSession

from cdc_assets.dagster.headless_demo import run_headless_demo


def test_headless_demo_ends_equal(tmp_path: Path, spark: SparkSession) -> None:
    lines: list[str] = []
    ok = run_headless_demo(tmp_path / "demo", 6, rows=25, tps=15, seed=3, say=lines.append)
    assert ok, "\n".join(lines)
    assert re.fullmatch(r"verified 5 tables at LSN 0x[0-9A-F]{20}: equal", lines[-1]), lines
    assert any(line.startswith("run 1: snapshot ok") for line in lines), lines
    runs = [line for line in lines if re.match(r"run \d+: [0-9a-f]{20}-[0-9a-f]{20} ok", line)]
    assert runs, f"no range was synced: {lines}"
    assert not any("FAILED" in line for line in lines), lines
