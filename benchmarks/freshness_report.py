"""The freshness benchmark's report (see :mod:`freshness`): per variant the freshness against the
target and the breakdown of a range run, then the variants against ``default``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from freshness_analysis import Commit, breakdown, spark_job_sites
from freshness_run import Variant

ROOT = Path(__file__).resolve().parent.parent
TARGET_SLACK = 10.0


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fmt(value: float, width: int = 7) -> str:
    return f"{value:{width}.2f}" if not math.isnan(value) else "-".rjust(width)


COMPONENTS = [
    ("capture: last commit of the range → max LSN", "capture"),
    ("sensor: captured → the tick that asks for the run", "sensor_wait"),
    ("tick start → run created", "tick"),
    ("run created → RUN_ENQUEUED (planned-event writes)", "submit"),
    ("run queue: RUN_ENQUEUED → RUN_STARTING", "queue"),
    ("launch: RUN_STARTING → run process started", "spawn"),
    ("process started → RUN_START (code location load)", "code_load"),
    ("RUN_START → change-log STEP_START", "setup"),
    ("Spark start: step start → SparkContext started", "spark_context"),
    ("SparkContext started → first SQL query (read planning)", "spark_first_query"),
    ("first SQL query → its first Spark job", "spark_first_job"),
    ("change-log step, after the first Spark job", "change_log_rest"),
    ("between the steps", "between"),
    ("mirror step, to the last mirror materialization", "mirror"),
    ("= last commit of the range → visible", "total"),
    ("sensor delay (last commit → run created)", "sensor_delay"),
    ("queue + launch (run created → RUN_START)", "queue_launch"),
    ("change-log step (whole)", "change_log_step"),
    ("mirror step (whole)", "mirror_step"),
    ("history step (whole; demo-histories)", "history_step"),
    ("change-log step: waiting for the range run before", "change_log_wait"),
    ("run: created → RUN_SUCCESS", "run_total"),
    ("Spark jobs per run: change-log step (count)", "jobs_change_log"),
    ("Spark jobs per run: mirror step (count)", "jobs_mirror"),
    ("Spark jobs per run: change-log step (summed job seconds)", "job_seconds_change_log"),
    ("Spark jobs per run: mirror step (summed job seconds)", "job_seconds_mirror"),
]


def report_variant(result: dict) -> dict[str, float]:
    variant: Variant = result["variant"]
    commits: list[Commit] = result["commits"]
    print(f"\nvariant {variant.name}: {variant.describe()}")
    setup = ", ".join(f"{k} {v:.1f} s" for k, v in result["setup"].items())
    print(f"  setup: {setup}")
    print(f"  workload: {result['workload_summary'].splitlines()[-1].strip()}")
    captured = [c.captured - c.committed for c in commits if c.captured is not None]
    visible = [c for c in commits if c.visible is not None]
    fresh = [c.visible - c.committed for c in visible]
    lost = len(commits) - len(visible)
    print(
        f"  {len(commits)} committed transactions; visible in the mirror: {len(visible)}"
        f"{f' ({lost} never, within the drain timeout)' if lost else ''}; mirrors caught up "
        f"{result['drain']:.1f} s after the workload ended"
    )
    print(f"  {'seconds (per committed transaction)':<48} {'p50':>7} {'p95':>7} {'max':>7}")
    ordered = sorted(result["runs"], key=lambda r: r.created)
    previous_end: dict[str, float | None] = {}
    for before, run in zip([None, *ordered], ordered, strict=False):
        ended = before and (before.events.get("success") or before.events.get("failure"))
        previous_end[run.run_id] = ended or None
    ticks_of = {r.run_id: (r.tick if r.tick is not None else r.created) for r in result["runs"]}
    waits, loops, owns = [], [], []
    for c in visible:
        tick = ticks_of[c.run_id]
        ready = c.captured if c.captured is not None else c.committed
        freed = min(max(ready, previous_end[c.run_id] or ready), tick)
        waits.append(freed - ready)
        loops.append(tick - freed)
        owns.append(c.visible - tick)
    lines = [
        ("capture latency: commit → max LSN", captured),
        ("freshness: commit → visible in the mirror", fresh),
        ("  = capture latency", captured),
        ("  + waiting for the run in flight to end", waits),
        ("  + then until the tick that asks for its run", loops),
        ("  + that tick → visible (its own run)", owns),
    ]
    for label, values in lines:
        print(
            f"  {label:<48} {fmt(percentile(values, 0.5))} {fmt(percentile(values, 0.95))} "
            f"{fmt(max(values) if values else math.nan)}"
        )
    p50_target = percentile(captured, 0.5) + TARGET_SLACK
    p95_target = percentile(captured, 0.95) + TARGET_SLACK
    within = sum(
        1
        for c in visible
        if c.captured is not None and c.visible - c.committed <= c.captured - c.committed + 10
    )
    p50, p95 = percentile(fresh, 0.5), percentile(fresh, 0.95)
    print(
        f"  target capture latency + {TARGET_SLACK:.0f} s: p50 {p50_target:.2f} s, p95 "
        f"{p95_target:.2f} s; freshness/target: p50 {p50 / p50_target:.2f}, p95 "
        f"{p95 / p95_target:.2f} ({'met' if p95 <= p95_target else 'MISSED'}); commits within "
        f"their own capture latency + {TARGET_SLACK:.0f} s: {within}/{len(commits)} "
        f"({100 * within / max(1, len(commits)):.0f}%)"
    )
    rows = breakdown(result)
    ranges = [
        r for r in result["runs"] if r.hi is not None and r.created >= result["workload_started"]
    ]
    created = [r.created for r in ranges]
    cycles = [b - a for a, b in itertools.pairwise(created)]
    spacing = [b - a for a, b in itertools.pairwise(result["ticks"])]
    statuses: dict[str, int] = {}
    for r in ranges:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    print(
        f"  {len(ranges)} range runs during the workload ({', '.join(f'{n} {s}' for s, n in statuses.items())}); "  # noqa: E501
        f"one run every {fmt(percentile(cycles, 0.5), 0)} s (p50, created → next created); "
        + (
            f"sensor ticks every {fmt(percentile(spacing, 0.5), 0)} s p50, "
            f"{fmt(percentile(spacing, 0.95), 0)} s p95"
            if spacing
            else "no sensor daemon"
        )
    )
    print(f"  where the time goes, per range run ({len(rows)} runs), seconds:")
    print(f"    {'component':<56} {'p50':>7} {'p95':>7} {'max':>7}")
    summary = {"p50": p50, "p95": p95, "capture_p50": percentile(captured, 0.5)}
    for label, key in COMPONENTS:
        values = [r[key] for r in rows if key in r and not math.isnan(r[key])]
        top = max(values) if values else math.nan
        print(
            f"    {label:<56} {fmt(percentile(values, 0.5))} {fmt(percentile(values, 0.95))} "
            f"{fmt(top)}"
        )
        summary[key] = percentile(values, 0.5)
    with_jobs = sum(1 for r in rows if r.get("jobs_change_log", 0) + r.get("jobs_mirror", 0))
    print(
        f"  range runs charged with a Spark job: {with_jobs} of {len(rows)} (a job of the run's "
        "own Spark session, or one of no client session while the run was in flight)"
    )
    sites = spark_job_sites(result)
    if sites:
        print("  Spark jobs of the range runs by call site (jobs, summed seconds):")
        for site, count, seconds in sites[:10]:
            print(f"    {count:4d} jobs {seconds:7.1f} s  {site}")
    if result["killed"]:
        print(f"  stopping dagster dev needed TERM/KILL for: {result['killed']}")
    if result["leftover"]:
        print(f"  LEFT RUNNING after stop: {result['leftover']}")
    if result["sampler"]["errors"]:
        print(f"  max-LSN sampler errors: {result['sampler']['errors']}")
    one, five, fifteen = result["load"]
    print(f"  load average at the end of the variant: {one:.2f} {five:.2f} {fifteen:.2f}")
    return summary


def compare(summaries: dict[str, dict[str, float]]) -> None:
    """Each variant's figures side by side, and each one's ratio to ``default``."""
    if len(summaries) < 2 or "default" not in summaries:
        return
    print("\nvariants against default (seconds; components: p50 over the range runs):")
    d = summaries["default"]
    others = [n for n in summaries if n != "default"]
    keys = [("freshness p50", "p50"), ("freshness p95", "p95")] + [
        (label.strip(), key) for label, key in COMPONENTS if key in d
    ]
    print(
        f"  {'':<56} "
        + " ".join(f"{n[:10]:>10}" for n in summaries)
        + "".join(f" {('/' + n)[:10]:>10}" for n in others)
    )
    for label, key in keys:
        values = [summaries[n].get(key, math.nan) for n in summaries]
        ratios = [
            d[key] / summaries[n].get(key, math.nan) if summaries[n].get(key) else math.nan
            for n in others
        ]
        print(
            f"  {label[:56]:<56} "
            + " ".join(fmt(v, 10) for v in values)
            + "".join(f" {fmt(r, 10)}" for r in ratios)
        )
    print("  (/x: default's figure divided by x's, so > 1 means x is faster)")
