"""``make demo``'s terminal repeats the warnings and errors of Dagster's log, one line each, but
not a run's own events (the run's line says that) nor Python's warning noise; a run the demo's
own stop ends says so."""

from __future__ import annotations

import re
import time
from pathlib import Path

from dagster import DagsterRunStatus, Failure, instance_for_test, job, op

from cdc_assets.dagster.demo.run_lines import _left_lines, _log_lines, describe_run
from cdc_assets.dagster.sync.names import PARTITION_TAG

RUN_ID = "02b21eb7-62f8-4b1c-93e1-17b74f73e465"


def test_log_lines_are_the_new_warnings_and_errors(tmp_path: Path) -> None:
    log = tmp_path / "dagster.log"
    log.write_text("2026-01-01 00:00:00 +0000 - dagster - ERROR - before the demo started\n")
    lines = _log_lines(log)
    assert next(lines) == ""  # what was there before is not news
    with log.open("a") as out:
        out.write(
            "2026-01-01 00:00:01 +0000 - dagster - DEBUG - demo_sync - step started\n"
            "\x1b[32m2026-01-01 00:00:02 +0000\x1b[0m - dagster.daemon.SensorDaemon - "
            "\x1b[33mWARNING\x1b[0m - sensor tick took 12 s\n"
            f"2026-01-01 00:00:03 +0000 - dagster - ERROR - demo_sync - {RUN_ID} - 26344 - "
            "RUN_FAILURE - Execution of run failed.\n"
            "/x/click/core.py:911: SupersessionWarning - WARNING - superseded\n"
            "2026-01-01 00:00:04 +0000 - dagster - ERROR - half a li"
        )
    assert [next(lines), next(lines)] == [
        "2026-01-01 00:00:02 +0000 - dagster.daemon.SensorDaemon - WARNING - sensor tick took 12 s",
        "",
    ]
    with log.open("a") as out:
        out.write("ne, now complete\n")
    assert next(lines) == "2026-01-01 00:00:04 +0000 - dagster - ERROR - half a line, now complete"


def test_a_run_the_demos_stop_ends_says_so_with_its_time() -> None:
    """A run that fails before the demo stops is a failure; one that ends after the demo began
    to stop (SIGUSR1 from demo_processes), or is left in flight, was stopped with the demo: its
    line says so, with how long it ran, not ``FAILURE after ?``."""

    @op
    def interrupted() -> None:
        raise Failure("Execution was interrupted")

    @job(tags={PARTITION_TAG: "snapshot"})
    def snapshot_run() -> None:
        interrupted()

    with instance_for_test() as instance:
        before = snapshot_run.execute_in_process(instance=instance, raise_on_error=False)
        stopping = time.time()
        after = snapshot_run.execute_in_process(instance=instance, raise_on_error=False)
        left = instance.create_run_for_job(
            snapshot_run, tags={PARTITION_TAG: "snapshot"}, status=DagsterRunStatus.STARTED
        )
        line, _ = describe_run(instance, before.run_id, stopping)
        assert re.fullmatch(
            r"run snapshot: FAILURE after \d+ s: .*Execution was interrupted.*", line.text()
        ), line.text()
        line, _ = describe_run(instance, after.run_id, stopping)
        assert re.fullmatch(r"run snapshot: stopped with the demo after \d+ s", line.text())
        assert describe_run(instance, after.run_id)[0].text().startswith("run snapshot: FAILURE")
        seen = {before.run_id, after.run_id}
        (said,) = _left_lines(instance, seen, stopping)
        assert re.fullmatch(
            r"run snapshot: stopped with the demo after \d+ s \(left STARTED\)", said
        )
        assert left.run_id in seen
