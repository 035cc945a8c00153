"""The soak benchmark's report (see :mod:`soak`): the samples cut into windows, the issue's
targets judged on them. Pure functions of the samples (no process, no file), so that a report
can be made again from the JSON the soak wrote.

Times are wall-clock seconds (``time.time()``); a window is ``[start, end)`` seconds after the
soak's clock started (every mirror and history built, the workload running).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from freshness_report import percentile

# The targets (issue 57, "What it must show").
P50_TARGET = 10.0
P95_TARGET = 20.0
P95_DRIFT = 1.25  # the last window's p95 at most this times the first's
FILES_TARGET = 64
RSS_GROWTH = 0.10
STORAGE_GROWTH = 0.10
STORAGE_SPAN = 20 * 60.0  # storage flat over the last 20 minutes ...
VACUUM_FLOOR = 3600.0  # ... of a run longer than the history kept + VACUUM's one-hour floor
CATCH_UP_TARGET = 60.0
JUDGED_KINDS = ("change log", "mirror", "history")
# the processes whose memory is judged (soak_samples.ROLES names them)
JUDGED_ROLES = ("daemon", "webserver", "code server", "Spark Connect (JVM)", "run worker")
PASS, MISS, NOT_JUDGED = "PASS", "MISS", "NOT JUDGED"


@dataclass(frozen=True)
class Verdict:
    target: str
    status: str  # PASS, MISS or NOT JUDGED
    detail: str

    def line(self) -> str:
        return f"{self.status:<10} {self.target}: {self.detail}"


# -- commit → mirror --------------------------------------------------------------------------
def first_reached(
    positions: Sequence[tuple[float, Sequence[int]]], count: int
) -> list[tuple[list[int], list[float]]]:
    """Per table (its index in the samples), the LSNs its mirror reached in order and when each
    was first seen (a running maximum: a sample that reads lower is not a step back)."""
    found: list[tuple[list[int], list[float]]] = [([], []) for _ in range(count)]
    for at, lsns in sorted(positions, key=lambda p: p[0]):
        for index, lsn in enumerate(lsns):
            reached, times = found[index]
            if lsn >= 0 and (not reached or lsn > reached[-1]):
                reached.append(lsn)
                times.append(at)
    return found


def visible_at(
    lsn: int, tables: Iterable[int], reached: Sequence[tuple[list[int], list[float]]]
) -> float | None:
    """When every mirror of ``tables`` (indexes) was first seen at or past ``lsn``; None: never."""
    latest = -math.inf
    for index in tables:
        lsns, times = reached[index]
        position = bisect.bisect_left(lsns, lsn)
        if position == len(lsns):
            return None
        latest = max(latest, times[position])
    return None if latest == -math.inf else latest


@dataclass(frozen=True)
class CommitSeen:
    lsn: int
    committed: float
    visible: float | None

    @property
    def latency(self) -> float | None:
        return None if self.visible is None else max(0.0, self.visible - self.committed)


def commits_seen(
    commits: Mapping[int, tuple[float, Sequence[str]]],
    positions: Sequence[tuple[float, Sequence[int]]],
    names: Sequence[str],
) -> list[CommitSeen]:
    """Every commit with when all the mirrors of the tables it touched showed it."""
    reached = first_reached(positions, len(names))
    index = {name: i for i, name in enumerate(names)}
    seen = []
    for lsn in sorted(commits):
        committed, tables = commits[lsn]
        ids = [index[t] for t in tables if t in index]
        seen.append(CommitSeen(lsn, committed, visible_at(lsn, ids, reached) if ids else None))
    return seen


def catch_up_seconds(seen: Sequence[CommitSeen], restart: float) -> float | None:
    """Seconds from the source's restart until every commit made before it was in its mirrors;
    None when one never was."""
    before = [c for c in seen if c.committed <= restart]
    if any(c.visible is None for c in before):
        return None
    return max([c.visible - restart for c in before if c.visible is not None] + [0.0])


# -- windows ------------------------------------------------------------------------------------
@dataclass
class Window:
    index: int  # from 1
    start: float  # seconds after the soak's start
    end: float
    commits: int = 0
    not_visible: int = 0
    p50: float = math.nan
    p95: float = math.nan
    max: float = math.nan
    most_files: dict[str, tuple[int, str]] = field(default_factory=dict)  # kind → (files, table)
    storage: dict[str, int] = field(default_factory=dict)  # kind → bytes (last sample), "total"
    rss: dict[str, float] = field(default_factory=dict)  # role → median bytes over the samples
    workers: int = 0  # run workers alive at most at once
    runs_ok: int = 0
    runs_failed: list[str] = field(default_factory=list)  # run ids
    maintenance_seconds: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{clock(self.start)}-{clock(self.end)}"


def clock(seconds: float) -> str:
    """``MM:SS`` (``-MM:SS`` before the soak's clock started)."""
    whole = round(seconds)
    sign, whole = ("-", -whole) if whole < 0 else ("", whole)
    return f"{sign}{whole // 60:02d}:{whole % 60:02d}"


def window_bounds(duration: float, length: float) -> list[tuple[float, float]]:
    """The windows of a run of ``duration`` seconds: ``length`` each; a last part shorter than
    half a window joins the window before it."""
    count = max(1, int(duration // length))
    if duration - count * length >= length / 2:
        count += 1
    bounds = [(i * length, min((i + 1) * length, duration)) for i in range(count)]
    return [(a, duration if i == count - 1 else b) for i, (a, b) in enumerate(bounds)]


def _in(at: float | None, t0: float, window: Window) -> bool:
    return at is not None and window.start <= at - t0 < window.end


def windows(
    t0: float,
    duration: float,
    length: float,
    seen: Sequence[CommitSeen],
    files: Sequence[Mapping[str, Any]],
    rss: Sequence[Mapping[str, Any]],
    runs: Mapping[str, Mapping[str, Any]],
) -> list[Window]:
    found = [Window(i + 1, a, b) for i, (a, b) in enumerate(window_bounds(duration, length))]
    for w in found:
        mine = [c for c in seen if _in(c.committed, t0, w)]
        latencies = [c.latency for c in mine if c.latency is not None]
        w.commits, w.not_visible = len(mine), len(mine) - len(latencies)
        w.p50, w.p95 = percentile(latencies, 0.5), percentile(latencies, 0.95)
        w.max = max(latencies) if latencies else math.nan
        for sample in (s for s in files if _in(s["at"], t0, w)):
            for row in sample["tables"]:
                count = row.get("live_files")
                best = w.most_files.get(row["kind"])
                if count is not None and (best is None or count > best[0]):
                    w.most_files[row["kind"]] = (count, row["table"])
            totals = _bytes_by_kind(sample)
            totals["total"] = sum(totals.values())
            w.storage = totals  # the window's last sample
        per_role: dict[str, list[float]] = {}
        for sample in (s for s in rss if _in(s["at"], t0, w)):
            for role, values in sample["roles"].items():
                value = max(values) if role == "run worker" else sum(values)
                per_role.setdefault(role, []).append(value)
                if role == "run worker":
                    w.workers = max(w.workers, len(values))
        w.rss = {role: statistics.median(values) for role, values in per_role.items()}
        for run_id, run in runs.items():
            if not _in(run.get("ended"), t0, w):
                continue
            if run["job"].endswith("_maintenance") and run.get("started") is not None:
                w.maintenance_seconds.append(run["ended"] - run["started"])
            if run["status"] == "SUCCESS":
                w.runs_ok += 1
            else:
                w.runs_failed.append(run_id)
    return found


# -- failed runs --------------------------------------------------------------------------------
def classify_failures(
    runs: Mapping[str, Mapping[str, Any]], events: Mapping[str, Any]
) -> dict[str, list[str]]:
    """The failed runs by cause: ``killed`` (the run whose worker the soak killed), ``outage``
    (in flight while the TDS server was stopped), ``maintenance`` (a failed maintenance run),
    ``other``."""
    kill = events.get("kill_worker") or {}
    outage = events.get("outage") or {}
    found: dict[str, list[str]] = {"killed": [], "outage": [], "maintenance": [], "other": []}
    for run_id, run in runs.items():
        if run["status"] == "SUCCESS":
            continue
        if run_id == kill.get("run_id"):
            found["killed"].append(run_id)
        elif run["job"].endswith("_maintenance"):
            found["maintenance"].append(run_id)
        elif _overlaps(run, outage.get("stopped"), outage.get("restarted")):
            found["outage"].append(run_id)
        else:
            found["other"].append(run_id)
    return found


def _overlaps(run: Mapping[str, Any], begin: float | None, end: float | None) -> bool:
    if begin is None or end is None:
        return False
    started = run.get("started") or run.get("created")
    ended = run.get("ended") or started
    return started is not None and started <= end and ended >= begin


# -- the targets --------------------------------------------------------------------------------
def judge_freshness(found: Sequence[Window], settled: float | None) -> Verdict:
    """p50/p95 in every window that starts once the outage was caught up (``settled``, seconds
    after the start), and the last window's p95 against the first's."""
    target = f"commit → mirror p50 ≤ {P50_TARGET:g} s and p95 ≤ {P95_TARGET:g} s after the catch-up"
    target += f", last window's p95 ≤ {P95_DRIFT:g}x the first's"
    if settled is None:
        return Verdict(target, MISS, "the outage was never caught up")
    after = [w for w in found if w.start >= settled]
    if not after:
        return Verdict(target, NOT_JUDGED, "no window starts after the catch-up; run longer")
    bad = [
        f"window {w.index} p50 {w.p50:.1f} s p95 {w.p95:.1f} s"
        for w in after
        if not (w.p50 <= P50_TARGET and w.p95 <= P95_TARGET)  # nan (no commits) fails too
    ]
    first, last = found[0], found[-1]
    drift = last.p95 / first.p95 if first.p95 > 0 else math.nan
    if not drift <= P95_DRIFT:
        bad.append(f"last p95 {last.p95:.1f} s is {drift:.2f}x the first's {first.p95:.1f} s")
    windows_text = f"windows {after[0].index}-{after[-1].index}"
    detail = f"{windows_text}: worst p50 {max(w.p50 for w in after):.1f} s, worst p95 "
    detail += f"{max(w.p95 for w in after):.1f} s; last/first p95 {drift:.2f}x"
    return Verdict(target, MISS if bad else PASS, "; ".join(bad) if bad else detail)


def judge_files(found: Sequence[Window]) -> Verdict:
    target = f"live data files per table ≤ {FILES_TARGET} in every window"
    target += " (change logs, mirrors, histories)"
    worst: dict[str, tuple[int, str, int]] = {}
    for w in found:
        for kind in JUDGED_KINDS:
            count, table = w.most_files.get(kind, (0, "-"))
            if kind not in worst or count > worst[kind][0]:
                worst[kind] = (count, table, w.index)
    missing = [k for k in JUDGED_KINDS if not any(k in w.most_files for w in found)]
    text = ", ".join(f"{k} {c} ({t}, window {i})" for k, (c, t, i) in worst.items())
    if missing:
        return Verdict(target, MISS, f"no {', '.join(missing)} was ever read; {text}")
    over = any(c > FILES_TARGET for c, _t, _i in worst.values())
    return Verdict(target, MISS if over else PASS, f"most: {text}")


def judge_memory(found: Sequence[Window]) -> Verdict:
    target = f"each process's RSS grows ≤ {RSS_GROWTH:.0%} from the third window to the last"
    if len(found) < 4:
        return Verdict(
            target, NOT_JUDGED, f"{len(found)} windows: the third is the last; run longer"
        )
    third, last = found[2], found[-1]
    parts, bad = [], []
    for role in JUDGED_ROLES:
        before, after = third.rss.get(role), last.rss.get(role)
        if not before or after is None:
            bad.append(f"{role}: not seen in window 3 or the last")
            continue
        growth = after / before - 1
        parts.append(f"{role} {growth:+.0%}")
        if growth > RSS_GROWTH:
            bad.append(f"{role} {before / 2**20:.0f} → {after / 2**20:.0f} MB ({growth:+.0%})")
    return Verdict(target, MISS if bad else PASS, "; ".join(bad) if bad else ", ".join(parts))


def storage_between(
    files: Sequence[Mapping[str, Any]], begin: float, end: float
) -> tuple[dict[str, int], dict[str, int]] | None:
    """Bytes per kind of the first and the last files sample in ``[begin, end]`` (wall times)."""
    inside = [s for s in files if begin <= s["at"] <= end]
    if not inside:
        return None
    return _bytes_by_kind(inside[0]), _bytes_by_kind(inside[-1])


def _bytes_by_kind(sample: Mapping[str, Any]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in sample["tables"]:
        totals[row["kind"]] = totals.get(row["kind"], 0) + row["bytes"]
    return totals


def judge_storage(
    files: Sequence[Mapping[str, Any]], t0: float, duration: float, keep_history: float
) -> Verdict:
    target = (
        f"change logs and mirrors grow ≤ {STORAGE_GROWTH:.0%} over the last "
        f"{STORAGE_SPAN / 60:.0f} minutes"
    )
    needed = keep_history + VACUUM_FLOOR + STORAGE_SPAN
    if duration < needed:
        return Verdict(
            target,
            NOT_JUDGED,
            f"needs a run of at least {needed / 60:.0f} min (history kept "
            f"{keep_history / 60:.0f} min + VACUUM's 60-minute floor + the {STORAGE_SPAN / 60:.0f} "
            f"minutes measured); this one ran {duration / 60:.0f} min",
        )
    found = storage_between(files, t0 + duration - STORAGE_SPAN, t0 + duration)
    if found is None:
        return Verdict(target, MISS, "no storage sample in the span")
    begin, end = found
    parts, bad = [], []
    for kind in ("change log", "mirror"):
        growth = end.get(kind, 0) / max(1, begin.get(kind, 0)) - 1
        text = f"{kind}s {mb(begin.get(kind, 0))} → {mb(end.get(kind, 0))} MB ({growth:+.0%})"
        parts.append(text)
        if growth > STORAGE_GROWTH:
            bad.append(text)
    return Verdict(target, MISS if bad else PASS, ", ".join(parts))


def judge_history_files(
    files: Sequence[Mapping[str, Any]], duration: float, keep_history: float, interval: float
) -> Verdict:
    """No history holds a data file its current version left longer ago than VACUUM keeps it
    (the history kept, at least VACUUM's hour) plus two maintenance intervals: a file that
    neither the current version nor the kept history references, VACUUM should have deleted."""
    allowed = max(VACUUM_FLOOR, keep_history) + 2 * interval
    target = (
        "histories hold no file that neither their current version nor the kept history references"
    )
    if duration < allowed:
        return Verdict(
            target,
            NOT_JUDGED,
            f"a file may stay {allowed / 60:.0f} min after its version (VACUUM's floor + two "
            f"maintenance intervals); this run lasted {duration / 60:.0f} min",
        )
    if not files:
        return Verdict(target, MISS, "no storage sample")
    rows = [r for r in files[-1]["tables"] if r["kind"] == "history"]
    stale = {r["table"]: sum(1 for a in r.get("not_live_ages", []) if a > allowed) for r in rows}
    bad = {t: n for t, n in stale.items() if n}
    detail = ", ".join(f"{t} {n}" for t, n in bad.items()) if bad else "none"
    return Verdict(
        target,
        MISS if bad else PASS,
        f"files left by their version more than {allowed / 60:.0f} min ago: {detail}",
    )


def judge_catch_up(seconds: float | None, happened: bool) -> Verdict:
    target = f"catch-up after the outage ≤ {CATCH_UP_TARGET:g} s"
    if not happened:
        return Verdict(target, NOT_JUDGED, "the outage did not happen (the run ended first)")
    if seconds is None:
        return Verdict(target, MISS, "not caught up by the end of the run")
    status = PASS if seconds <= CATCH_UP_TARGET else MISS
    return Verdict(target, status, f"{seconds:.1f} s")


def judge_failures(classified: Mapping[str, list[str]]) -> Verdict:
    target = "0 failed runs other than the injected faults, no maintenance failure"
    counts = ", ".join(f"{len(v)} {k}" for k, v in classified.items())
    bad = classified["other"] or classified["maintenance"]
    note = " (a run in flight while the source was stopped is excused, whatever its error)"
    return Verdict(target, MISS if bad else PASS, counts + note)


def judge_equal(results: Mapping[str, str]) -> Verdict:
    target = "every mirror and history equal to the source at the end"
    if not results:
        return Verdict(target, MISS, "not compared (the run ended before its final check)")
    bad = {k: v for k, v in results.items() if v != "equal"}
    text = "; ".join(f"{k}: {v}" for k, v in bad.items()) if bad else f"{len(results)} equal"
    return Verdict(target, MISS if bad else PASS, text)


# -- printing -----------------------------------------------------------------------------------
def mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f}"


def window_lines(w: Window) -> list[str]:
    files = ", ".join(f"{k} {c} ({t})" for k, (c, t) in sorted(w.most_files.items()))
    storage = ", ".join(f"{k} {mb(v)}" for k, v in w.storage.items())
    roles = []
    for role, value in sorted(w.rss.items()):
        count = f"{w.workers}x " if role == "run worker" else ""
        roles.append(f"{role} {count}{value / 2**20:,.0f}")
    maintenance = (
        f"{len(w.maintenance_seconds)} ({', '.join(f'{s:.0f} s' for s in w.maintenance_seconds)})"
        if w.maintenance_seconds
        else "0"
    )
    invisible = f", {w.not_visible} not in their mirror by the end" if w.not_visible else ""
    return [
        f"window {w.index:2d} {w.label}: commit → mirror p50 {w.p50:.1f} s, p95 {w.p95:.1f} s, "
        f"max {w.max:.1f} s ({w.commits:,} commits{invisible})",
        f"    most live data files: {files or 'none read'}",
        f"    storage MB: {storage or 'none read'}",
        f"    RSS MB (median): {', '.join(roles) or 'none read'}",
        f"    runs ended: {w.runs_ok} succeeded, {len(w.runs_failed)} failed; maintenance runs "
        f"{maintenance}",
    ]
