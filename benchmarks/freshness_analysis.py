"""The freshness benchmark's analysis (see :mod:`freshness`): every committed transaction of a
variant joined with when capture saw it and when its mirrors showed it (Dagster's event log),
and per range run where the time went (Dagster's and Spark's event logs)."""

from __future__ import annotations

import bisect
import datetime as dt
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from freshness_run import VARIANTS, LsnSampler

from cdc_assets import emulator
from cdc_assets.config import load_config
from cdc_assets.dagster.sync.names import PARTITION_TAG
from cdc_assets.dagster.sync.partitions import parse_partition
from cdc_assets.dagster.sync.source import Source, load_source
from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver import changed_lsns, transaction_commits

# The tag Spark Connect gives every job of a client's operation (spark.job.tags)
CONNECT_SESSION = re.compile(r"SparkConnect_OperationTag_User_[^,]*?_Session_([0-9a-f-]{36})_")

ROOT = Path(__file__).resolve().parent.parent


def local_timestamp(value: dt.datetime) -> float:
    """Unix time of the emulator's server clock (naive local time, like GETDATE())."""
    return value.timestamp()


def utc_timestamp(value: dt.datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()


@dataclass
class Commit:
    lsn: int
    committed: float
    tables: set[str]
    captured: float | None = None
    visible: float | None = None
    run_id: str | None = None


@dataclass
class RunInfo:
    run_id: str
    partition: str
    lo: int | None
    hi: int | None
    created: float
    status: str
    events: dict[str, float] = field(default_factory=dict)  # first occurrence of each type
    steps: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    mirrors: list[tuple[float, str, int]] = field(default_factory=list)
    tick: float | None = None
    spark_app: dict[str, Any] | None = None
    pid: int | None = None  # of the process that ran it ("Started process for run (pid: N)")


def analyze(workdir: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Commits, runs and ticks of a variant's directory, joined."""
    config_path = workdir / "cdc_assets.yaml"
    source = load_source(load_config(config_path).sources[0], workdir / "storage")
    sampler = LsnSampler.from_samples(meta["sampler"]["times"], meta["sampler"]["lsns"])
    commits = read_commits(workdir / "source.db", source, meta["baseline_lsn"])
    for commit in commits:
        commit.captured = sampler.captured_at(commit.lsn)
    runs, ticks = read_dagster(workdir / "dagster_home", meta["workload_started"] - 120)
    attach_spark(runs, workdir / "spark-events")
    assign_visibility(commits, runs, source)
    return {
        **meta,
        "variant": VARIANTS[meta["variant"]],
        "commits": commits,
        "runs": runs,
        "ticks": ticks,
    }


def read_commits(db: Path, source: Source, after: int) -> list[Commit]:
    conn = emulator.connect(db, autocommit=True)
    try:
        touched: dict[int, set[str]] = {}
        for table in source.tables:
            for value in changed_lsns(conn, table.instance.name):
                touched.setdefault(int(value), set()).add(table.instance.name)
        commits = [
            Commit(int(lsn), local_timestamp(end_time), touched[int(lsn)])
            for lsn, end_time in transaction_commits(conn, Lsn.from_int(max(after, 0)))
            if int(lsn) in touched
        ]
    finally:
        conn.close()
    return sorted(commits, key=lambda c: c.lsn)


def read_dagster(home: Path, since: float) -> tuple[list[RunInfo], list[float]]:
    from dagster import DagsterEventType, DagsterInstance
    from dagster._core.scheduler.instigation import InstigatorType

    wanted = {
        DagsterEventType.RUN_ENQUEUED.value: "enqueued",
        DagsterEventType.RUN_STARTING.value: "starting",
        DagsterEventType.RUN_START.value: "started",
        DagsterEventType.RUN_SUCCESS.value: "success",
        DagsterEventType.RUN_FAILURE.value: "failure",
    }
    runs: list[RunInfo] = []
    ticks: list[float] = []
    with DagsterInstance.from_config(str(home)) as instance:
        tick_of: dict[str, float] = {}
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id):
                ticks.append(tick.timestamp)
                for run_id in tick.run_ids:
                    tick_of[run_id] = tick.timestamp
        for record in instance.get_run_records():
            run = record.dagster_run
            partition = run.tags.get(PARTITION_TAG) or run.tags.get("dagster/partition") or ""
            lsn_range = parse_partition(partition) if partition else None
            info = RunInfo(
                run.run_id,
                partition,
                int(lsn_range.lo) if lsn_range else None,
                int(lsn_range.hi) if lsn_range else None,
                utc_timestamp(record.create_timestamp),
                run.status.value,
                tick=tick_of.get(run.run_id),
            )
            for entry in instance.all_logs(run.run_id):
                event = entry.dagster_event
                if event is None:
                    continue
                kind = event.event_type_value
                if kind in wanted:
                    info.events.setdefault(wanted[kind], entry.timestamp)
                elif kind == DagsterEventType.ENGINE_EVENT.value and (
                    event.message or ""
                ).startswith("Started process for run"):
                    info.events.setdefault("process", entry.timestamp)
                    found = re.search(r"pid: (\d+)", event.message or "")
                    info.pid = int(found.group(1)) if found else None
                elif kind == DagsterEventType.STEP_START.value:
                    info.steps[event.step_key or "?"] = (entry.timestamp, None)
                elif kind == DagsterEventType.STEP_SUCCESS.value and event.step_key in info.steps:
                    info.steps[event.step_key] = (info.steps[event.step_key][0], entry.timestamp)
                elif kind == DagsterEventType.ASSET_MATERIALIZATION.value:
                    metadata = event.event_specific_data.materialization.metadata
                    if "mirror_lsn" in metadata:
                        lsn = int(Lsn.parse(str(metadata["mirror_lsn"].value)))
                        key = event.asset_key.to_user_string()
                        info.mirrors.append((entry.timestamp, key, lsn))
            runs.append(info)
    ticks = sorted(t for t in ticks if t >= since)
    return sorted(runs, key=lambda r: r.created), ticks


def attach_spark(runs: list[RunInfo], events: Path) -> None:
    """Each run's Spark application from Spark's event log: the SparkContext's start, and per
    job its submission and completion (ms → s)."""
    apps = []
    for path in events.iterdir():
        app: dict[str, Any] = {"jobs": {}}
        queries: dict[int, str] = {}
        files = sorted(path.iterdir()) if path.is_dir() else [path]
        text = "\n".join(
            f.read_text(errors="replace")
            for f in files
            if f.name.startswith(("app-", "local-", "events_"))
        )
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            name = event.get("Event")
            if name == "SparkListenerApplicationStart":
                app["start"] = event["Timestamp"] / 1000
            elif name == "SparkListenerApplicationEnd":
                app["end"] = event["Timestamp"] / 1000
            elif name.endswith("SparkListenerSQLExecutionStart"):
                queries[event["executionId"]] = short_site(event.get("description", "?"))
                app.setdefault("queries", []).append(event["time"] / 1000)
            elif name == "SparkListenerJobStart":
                query = (event.get("Properties") or {}).get("spark.sql.execution.id")
                stages = event.get("Stage Infos") or [{}]
                label = (
                    f"in SQL execution '{queries.get(int(query), '?')}'"
                    if query is not None
                    else f"outside SQL executions: '{short_site(stages[0].get('Stage Name', '?'))}'"
                )
                tags = (event.get("Properties") or {}).get("spark.job.tags") or ""
                session = CONNECT_SESSION.search(tags)
                app["jobs"][event["Job ID"]] = [
                    event["Submission Time"] / 1000,
                    None,
                    label,
                    session.group(1) if session else None,
                ]
            elif name == "SparkListenerJobEnd" and event["Job ID"] in app["jobs"]:
                app["jobs"][event["Job ID"]][1] = event["Completion Time"] / 1000
        if "start" in app:
            apps.append(app)
    windows = [(w, run) for run in runs if (w := run_window(run)) is not None]
    for app in apps:
        owners = session_owners(app["jobs"].values(), windows)
        for (begin, end), run in windows:
            if app["start"] <= end and app.get("end", math.inf) >= begin:
                jobs = {
                    k: j
                    for k, j in app["jobs"].items()
                    if begin <= j[0] <= end and owners.get(j[3], run.pid) == run.pid
                }
                queries = [t for t in app.get("queries", []) if begin <= t <= end]
                run.spark_app = {**app, "jobs": jobs, "queries": queries}


def run_window(run: RunInfo) -> tuple[float, float] | None:
    begin = run.events.get("started")
    end = run.events.get("success") or run.events.get("failure")
    return None if begin is None or end is None else (begin, end)


def session_owners(
    jobs: Iterable[list[Any]], windows: list[tuple[tuple[float, float], RunInfo]]
) -> dict[str | None, int]:
    """The process of each Spark Connect session whose every job ran while a run of that process
    was in flight, and no other process has that in common: a run worker keeps one session
    for all its runs, so a range run is charged only with its own process's jobs, not those of a
    maintenance or health run beside it. Jobs of an unknown session go by time alone."""
    common: dict[str, set[int]] = {}
    for job in jobs:
        session = job[3]
        if session is None:
            continue
        pids = {r.pid for (b, e), r in windows if b <= job[0] <= e and r.pid is not None}
        common[session] = common[session] & pids if session in common else pids
    return {session: next(iter(pids)) for session, pids in common.items() if len(pids) == 1}


def short_site(text: str) -> str:
    """``collect at /x/y/change_log.py:113`` → ``collect at change_log.py:113``; a Spark Connect
    plan's description → its first line."""
    text = " ".join(text.split("\n", 1)[0].split())
    head, _, where = text.partition(" at ")
    return f"{head} at {where.rsplit('/', 1)[-1]}" if where else head


def assign_visibility(commits: list[Commit], runs: list[RunInfo], source: Source) -> None:
    by_table: dict[str, list[tuple[float, int, str]]] = {}
    names = {t.mirror_key.to_user_string(): t.instance.name for t in source.tables}
    for run in runs:
        for when, key, lsn in run.mirrors:
            by_table.setdefault(names.get(key, key), []).append((when, lsn, run.run_id))
    index: dict[str, tuple[list[int], list[tuple[float, str]]]] = {}
    for name, items in by_table.items():
        items.sort()
        # the first time the mirror reached each LSN: running maximum over time
        lsns, firsts, highest = [], [], -1
        for when, lsn, run_id in items:
            if lsn > highest:
                lsns.append(lsn)
                firsts.append((when, run_id))
                highest = lsn
        index[name] = (lsns, firsts)
    for commit in commits:
        seen = []
        for name in commit.tables:
            lsns, firsts = index.get(name, ([], []))
            position = bisect.bisect_left(lsns, commit.lsn)
            if position == len(lsns):
                seen = []
                break
            seen.append(firsts[position])
        if seen:
            commit.visible, commit.run_id = max(seen)


def breakdown(result: dict) -> list[dict[str, float]]:
    commits: list[Commit] = result["commits"]
    rows = []
    runs = [r for r in result["runs"] if r.hi is not None and r.status == "SUCCESS"]
    for run in runs:
        if run.created < result["workload_started"]:
            continue
        inside = [c for c in commits if run.lo < c.lsn <= run.hi and c.captured is not None]
        steps = sorted(run.steps.items(), key=lambda s: s[1][0])
        change_log = next((v for k, v in steps if "change_logs" in k), None)
        mirror = next((v for k, v in steps if "mirrors" in k), None)
        history = next((v for k, v in steps if "histories" in k), None)
        if not inside or change_log is None or mirror is None or not run.mirrors:
            continue
        # how long its change-log step waited for the range runs before it (range_order)
        before = [
            r.events.get("success", math.nan) for r in runs if r.hi is not None and r.hi <= run.lo
        ]
        ended = max([b for b in before if not math.isnan(b)], default=change_log[0])
        last = max(inside, key=lambda c: c.committed)
        visible = max(when for when, _, _ in run.mirrors)
        e = run.events
        tick = run.tick if run.tick is not None else run.created
        row = {
            "capture": last.captured - last.committed,
            "sensor_wait": tick - last.captured,
            "tick": run.created - tick,
            "submit": e.get("enqueued", math.nan) - run.created,
            "queue": e.get("starting", math.nan) - e.get("enqueued", math.nan),
            "spawn": e.get("process", math.nan) - e.get("starting", math.nan),
            "code_load": e["started"] - e.get("process", math.nan),
            "queue_launch": e["started"] - run.created,
            "setup": change_log[0] - e["started"],
            "between": mirror[0] - (change_log[1] or mirror[0]),
            "mirror": visible - mirror[0],
            "total": visible - last.committed,
            "sensor_delay": run.created - last.committed,
            "change_log_step": (change_log[1] or math.nan) - change_log[0],
            "mirror_step": (mirror[1] or math.nan) - mirror[0],
            "history_step": (history[1] or math.nan) - history[0] if history else math.nan,
            "change_log_wait": max(0.0, min(ended, change_log[1] or ended) - change_log[0]),
            "run_total": e["success"] - run.created,
        }
        app = run.spark_app
        if app is not None and app["jobs"]:
            first_job = min(job[0] for job in app["jobs"].values())
            # 0 when the session was up before the step (the in-process variant)
            row["spark_context"] = max(0.0, app["start"] - change_log[0])
            first_query = min(app["queries"] or [first_job])
            row["spark_first_query"] = first_query - max(app["start"], change_log[0])
            row["spark_first_job"] = first_job - first_query
            row["change_log_rest"] = (change_log[1] or math.nan) - first_job
            for key, (begin, end) in (("jobs_change_log", change_log), ("jobs_mirror", mirror)):
                jobs = [j for j in app["jobs"].values() if begin <= j[0] <= (end or begin)]
                row[key] = len(jobs)
                row[key.replace("jobs", "job_seconds")] = sum((j[1] or j[0]) - j[0] for j in jobs)
        else:  # no Spark job charged to this run
            row["change_log_rest"] = (change_log[1] or math.nan) - change_log[0]
            for key in ("jobs_change_log", "jobs_mirror"):
                row[key] = row[key.replace("jobs", "job_seconds")] = 0
        rows.append(row)
    return rows


def spark_job_sites(result: dict) -> list[tuple[str, int, float]]:
    """Spark jobs of the range runs grouped by call site: (site, jobs, summed seconds)."""
    groups: dict[str, list[float]] = {}
    for run in result["runs"]:
        if run.hi is None or run.spark_app is None or run.created < result["workload_started"]:
            continue
        for start, end, site, _session in run.spark_app["jobs"].values():
            groups.setdefault(site, []).append((end or start) - start)
    return sorted(((site, len(v), sum(v)) for site, v in groups.items()), key=lambda item: -item[2])
