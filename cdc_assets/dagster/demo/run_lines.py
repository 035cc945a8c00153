"""One line per finished sync run: what ``make demo``'s terminal shows instead of Dagster's log.

``python -m cdc_assets.dagster.demo.run_lines LOG`` follows the instance ``$DAGSTER_HOME`` and
prints, for every run that ends, its partition, the tables it changed, the rows, how long it took
and the lag of the newest commit it carried; a failed run or a failed check as one
``FAILED``/``check`` line with Dagster's message. While a run takes a big table's snapshot, each
batch of chunks it commits gives a progress line (rows done of the rows expected, chunks, rows/s,
time left: the run's observations of the change log's ``snapshot`` partition). It also follows the
log file ``LOG`` (where ``dagster dev`` writes) and repeats its warnings and errors, one line each.
SIGUSR1 tells it the demo is stopping (``demo_processes`` sends it before it stops Dagster): a run
that ends from then on, or is left in flight, says ``stopped with the demo after N s``, not
FAILURE. SIGINT or SIGTERM ends it, after a last line for each run that ended meanwhile.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, RunsFilter

from ..sync.names import PARTITION_TAG, TABLES_TAG
from ..sync.range_order import FINISHED, IN_FLIGHT
from ..sync.runs_in_flight import failure_message

# Dagster's log lines: "<time> - <logger> - <LEVEL> - <message>" (colour codes stripped).
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_LEVEL = re.compile(r" - (WARNING|ERROR|CRITICAL) - ")
# A run's own events (" - <job> - <run id> - "): its run line says the same, once.
_RUN_EVENT = re.compile(r" - (WARNING|ERROR|CRITICAL) - \S+ - [0-9a-f]{8}-[0-9a-f-]{27} - ")
# Lines Dagster writes at WARNING that say nothing about this sync.
_NOISE = ("SupersessionWarning", "BetaWarning", "PreviewWarning", "warnings.warn(")


@dataclass(frozen=True)
class RunLine:
    partition: str
    status: str
    tables_changed: int
    tables: int
    rows: int
    seconds: float | None
    lag_seconds: float | None
    failure: str = ""
    newest_commit: str = ""  # HH:MM:SS (UTC) of the newest commit the run carried
    stopped_with_demo: bool = False  # it ended (or was left) because the demo stopped

    def text(self) -> str:
        took = f"{self.seconds:.0f} s" if self.seconds is not None else "?"
        if self.stopped_with_demo:
            return f"run {self.partition}: stopped with the demo after {took}"
        if self.status != "SUCCESS":
            why = f": {self.failure}" if self.failure else ""
            return f"run {self.partition}: {self.status} after {took}{why}"
        lag = ""
        if self.lag_seconds is not None:
            at = f" at {self.newest_commit}" if self.newest_commit else ""
            lag = f", newest commit{at} {self.lag_seconds:.0f} s old"
        return (
            f"run {self.partition}: {self.tables_changed} of {self.tables} tables changed, "
            f"{self.rows:,} rows, {took}{lag}"
        )


def _number(metadata: dict, key: str) -> float | None:
    value = metadata.get(key)
    raw = getattr(value, "value", value)
    return float(raw) if isinstance(raw, int | float) else None


def describe_run(
    instance: DagsterInstance, run_id: str, stopping: float | None = None
) -> tuple[RunLine, list[str]]:
    """The line for a run and one line per failed asset check of it. ``stopping``: when the
    demo began to stop; a run that did not succeed and ended after it (or has not ended) was
    stopped with the demo, and says so. Its time runs from its start (or, never started, from
    when it was asked for) to its end (or now)."""
    record = instance.get_run_record_by_id(run_id)
    assert record is not None
    run = record.dagster_run
    partition = run.tags.get(PARTITION_TAG) or run.tags.get("dagster/partition") or "-"
    if partition == "-":
        partition = f"{run.job_name} (no partition)"
    began = record.start_time or record.create_timestamp.timestamp()
    ended = record.end_time if record.end_time is not None else time.time()
    seconds = max(0.0, ended - began)
    stopped = stopping is not None and run.status != DagsterRunStatus.SUCCESS and ended >= stopping
    tables = changed = rows = 0
    lags: list[float] = []
    newest = ""
    for event in instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION, limit=10_000
    ).records:
        materialization = event.event_log_entry.asset_materialization
        if materialization is None or materialization.asset_key.path[0] != "cdc":
            continue
        metadata = dict(materialization.metadata)
        count = int(_number(metadata, "dagster/row_count") or 0)
        tables += 1
        changed += count > 0
        rows += count
        lag = _number(metadata, "lag_seconds")
        if lag is not None and count > 0:
            lags.append(lag)
        commits = getattr(metadata.get("commit_time_range"), "value", "")
        last = str(commits).rpartition(" .. ")[2]
        if count > 0 and re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", last):
            newest = max(newest, last[11:19])
    checks = []
    for event in instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION, limit=10_000
    ).records:
        dagster_event = event.event_log_entry.dagster_event
        evaluation = dagster_event.event_specific_data if dagster_event else None
        if evaluation is not None and not getattr(evaluation, "passed", True):
            key = evaluation.asset_check_key
            description = getattr(evaluation, "description", None) or "failed"
            checks.append(
                f"check {key.asset_key.to_user_string()} {key.name} failed "
                f"(run {partition}): {' '.join(description.split())}"
            )
    failure = failure_message(instance, run_id) if run.status != DagsterRunStatus.SUCCESS else ""
    known = run.tags.get(TABLES_TAG, "")
    # the source's tables (a run works on those that changed; the rest are recorded quiet)
    tables = int(known) if known.isdigit() else tables
    line = RunLine(
        partition,
        run.status.value,
        changed,
        tables,
        rows,
        seconds,
        min(lags) if lags else None,
        failure,
        newest,
        stopped,
    )
    return line, checks


SNAPSHOT_PROGRESS = "snapshot_rows_done"  # in the metadata of a snapshot's progress reports


def progress_lines(
    instance: DagsterInstance, run_id: str, cursor: str | None = None
) -> tuple[list[str], str | None]:
    """The snapshot progress a run reported after ``cursor`` (None: from its start), one line
    each, and the cursor to ask from next time."""
    found = instance.get_records_for_run(
        run_id, cursor=cursor, of_type=DagsterEventType.ASSET_OBSERVATION, limit=1000
    )
    lines = []
    for record in found.records:
        observation = record.event_log_entry.asset_observation
        if observation is None or SNAPSHOT_PROGRESS not in observation.metadata:
            continue
        run = instance.get_run_by_id(run_id)
        partition = run.tags.get(PARTITION_TAG, "-") if run is not None else "-"
        lines.append(f"run {partition} (running): {observation.description}")
    return lines, found.cursor or cursor


def _log_lines(path: Path) -> Iterator[str]:
    """New warning and error lines of the log at ``path`` since the last call (none at first)."""
    position = path.stat().st_size if path.exists() else 0
    while True:
        found: list[str] = []
        if path.exists():
            size = path.stat().st_size
            if size < position:
                position = 0
            with path.open("r", encoding="utf-8", errors="replace") as log:
                log.seek(position)
                chunk = log.read()
                complete = chunk.rfind("\n") + 1
                position += len(chunk[:complete].encode("utf-8", errors="replace"))
            for raw in chunk[:complete].splitlines():
                line = _COLOUR.sub("", raw).strip()
                if _LEVEL.search(line) and not _RUN_EVENT.search(line):
                    if any(n in line for n in _NOISE):
                        continue
                    found.append(line[:400])
        yield from found
        yield ""


def _finished_lines(
    instance: DagsterInstance, seen: set[str], stopping: float | None
) -> Iterator[str]:
    """The lines of the runs that finished since ``seen`` (which they join), oldest first."""
    records = instance.get_run_records(RunsFilter(statuses=FINISHED), limit=50)
    for record in reversed(records):
        run_id = record.dagster_run.run_id
        if run_id in seen:
            continue
        seen.add(run_id)
        line, checks = describe_run(instance, run_id, stopping)
        # A run of no partition (the health job every 5 minutes, a check launched by hand) is
        # news only when it fails or a check fails.
        if not line.partition.endswith("(no partition)") or line.status != "SUCCESS":
            yield line.text()
        yield from checks


def _left_lines(instance: DagsterInstance, seen: set[str], stopping: float) -> Iterator[str]:
    """The runs the stopping demo leaves in flight (Dagster stopped before it recorded their
    end): each stopped with the demo (the next ``make demo`` marks them failed, and the sync
    sensor runs their range again)."""
    for record in reversed(instance.get_run_records(RunsFilter(statuses=IN_FLIGHT), limit=50)):
        if record.dagster_run.run_id not in seen:
            seen.add(record.dagster_run.run_id)
            line, _ = describe_run(instance, record.dagster_run.run_id, stopping)
            yield f"{line.text()} (left {record.dagster_run.status.value})"


def follow(log: Path, out: IO[str], interval: float = 2.0) -> None:
    """Print run lines and log warnings until SIGINT/SIGTERM. SIGUSR1 says the demo is
    stopping: the runs that end from then on were stopped with it, and the lines say so."""
    stop = False
    stopping: float | None = None

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop, stopping
        stopping = stopping or time.time()
        stop = stop or signum != signal.SIGUSR1

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    seen: set[str] = set()
    progress: dict[str, str | None] = {}  # a running run's cursor in its progress reports
    lines = _log_lines(log)

    def say(line: str) -> None:
        out.write(f"demo: {line}\n")

    with DagsterInstance.get() as instance:
        # Runs finished before this demo started are not news.
        seen.update(r.dagster_run.run_id for r in instance.get_run_records(RunsFilter()))
        while not stop:
            for line in iter(lambda: next(lines), ""):
                say(line)
            running = instance.get_run_records(
                RunsFilter(statuses=[DagsterRunStatus.STARTED]), limit=20
            )
            for record in running:
                run_id = record.dagster_run.run_id
                if run_id in seen:
                    continue
                reports, progress[run_id] = progress_lines(instance, run_id, progress.get(run_id))
                for report in reports:
                    say(report)
            for line in _finished_lines(instance, seen, stopping):
                say(line)
            out.flush()
            for _ in range(int(interval * 10)):
                if stop:
                    break
                time.sleep(0.1)
        # the last word: what ended meanwhile, and what the stop leaves in flight
        assert stopping is not None
        for line in (
            *_finished_lines(instance, seen, stopping),
            *_left_lines(instance, seen, stopping),
        ):
            say(line)
        out.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m cdc_assets.dagster.demo.run_lines LOG\n")
        return 2
    follow(Path(args[0]), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
