"""``cdc-assets demo --headless``: the real definitions synced while a workload writes, then every
mirror compared with its source table."""

from __future__ import annotations

import re
from pathlib import Path

from dagster import DagsterInstance, RunsFilter
from dagster._core.instance.ref import InstanceRef
from pyspark.sql import SparkSession

from cdc_assets.dagster.demo.headless_demo import run_headless_demo
from cdc_assets.dagster.demo.run_lines import describe_run


def test_headless_demo_ends_equal(tmp_path: Path, spark: SparkSession) -> None:
    lines: list[str] = []
    ok = run_headless_demo(tmp_path / "demo", 6, rows=25, tps=15, seed=3, say=lines.append)
    assert ok, "\n".join(lines)
    assert re.fullmatch(r"verified 5 tables at LSN 0x[0-9A-F]{20}: equal", lines[-1]), lines
    assert any(line.startswith("run 1: snapshot ok") for line in lines), lines
    runs = [line for line in lines if re.match(r"run \d+: [0-9a-f]{20}-[0-9a-f]{20} ok", line)]
    assert runs, f"no range was synced: {lines}"
    assert not any("FAILED" in line for line in lines), lines

    # What `make demo` prints per run (cdc_assets.dagster.demo.run_lines), read back from the
    # demo's instance: partition, tables changed, rows, duration, the newest commit.
    with DagsterInstance.from_ref(InstanceRef.from_dir(str(tmp_path / "demo/dagster_home"))) as i:
        described = [
            describe_run(i, r.dagster_run.run_id) for r in reversed(i.get_run_records(RunsFilter()))
        ]
    texts = [line.text() for line, _checks in described]
    assert re.fullmatch(r"run snapshot: 5 of 5 tables changed, [\d,]+ rows, \d+ s", texts[0]), texts
    ranges = [t for t in texts[1:] if re.match(r"run [0-9a-f]{20}-[0-9a-f]{20}: ", t)]
    assert ranges, texts
    for text in ranges:  # a range that carried rows names the time of its newest commit
        assert re.fullmatch(
            r"run [0-9a-f]{20}-[0-9a-f]{20}: ([0-5]) of 5 tables changed, ([\d,]+) rows, \d+ s"
            r"(, newest commit at \d\d:\d\d:\d\d \d+ s old)?",
            text,
        ), text
        assert ("0 of 5" in text) == ("newest commit" not in text), text
    assert all(not checks for _line, checks in described), described
