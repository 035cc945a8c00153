"""``make demo``'s terminal repeats the warnings and errors of Dagster's log, one line each, but
not a run's own events (the run's line says that) nor Python's warning noise."""

from __future__ import annotations

from pathlib import Path

from cdc_assets.dagster.demo.run_lines import _log_lines

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
