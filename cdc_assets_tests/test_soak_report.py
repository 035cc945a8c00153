"""The soak benchmark's pure parts (``benchmarks/soak_report.py``): when a commit is seen in its
mirrors, the windows' statistics, and the judgement of the issue's targets on made-up samples
(the soak itself runs for 90 minutes: ``benchmarks/soak.py``)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import soak_report as report

T0 = 1_000_000.0
MB = 2**20


def test_a_commit_is_visible_when_every_mirror_it_touched_reached_it() -> None:
    # two tables; a sample reading lower than the one before is not a step back
    positions = [(T0 + 1, [5, 3]), (T0 + 2, [9, 3]), (T0 + 3, [8, 7]), (T0 + 4, [12, 12])]
    commits = {
        4: (T0, ["a"]),  # a's mirror at 5 from the first sample
        7: (T0 + 0.5, ["a", "b"]),  # a reached 9 at +2, b reached 7 at +3
        11: (T0 + 1.5, ["b"]),  # b at 12 at +4
        13: (T0 + 2, ["a"]),  # never
    }
    seen = {c.lsn: c for c in report.commits_seen(commits, positions, ["a", "b"])}
    assert seen[4].visible == T0 + 1 and seen[4].latency == 1
    assert seen[7].visible == T0 + 3 and seen[7].latency == 2.5
    assert seen[11].latency == 2.5
    assert seen[13].visible is None and seen[13].latency is None
    # everything committed before T0 + 1 was in its mirrors 2 s after that
    assert report.catch_up_seconds(list(seen.values()), T0 + 1) == 2.0
    assert report.catch_up_seconds(list(seen.values()), T0 + 2) is None  # lsn 13 never came


def test_windows_cut_the_samples_by_time() -> None:
    seen = [report.CommitSeen(i, T0 + i, T0 + i + (1 if i < 300 else 30)) for i in range(600)]
    seen.append(report.CommitSeen(600, T0 + 400, None))
    files = [
        {
            "at": T0 + at,
            "tables": [
                {"kind": "mirror", "table": "orders", "bytes": 10 * MB, "live_files": count},
                {"kind": "mirror", "table": "events", "bytes": 5 * MB, "live_files": 3},
                {"kind": "change log", "table": "orders", "bytes": MB, "live_files": 1},
            ],
        }
        for at, count in ((100, 7), (200, 9), (400, 2))
    ]
    rss = [
        {"at": T0 + at, "roles": {"daemon": [100], "run worker": [50, 80]}}
        for at in (100, 200, 400)
    ]
    runs = {
        "ok": {"job": "demo_sync", "status": "SUCCESS", "created": T0, "ended": T0 + 10},
        "bad": {"job": "demo_sync", "status": "FAILURE", "created": T0, "ended": T0 + 350},
        "m": {
            "job": "demo_maintenance",
            "status": "SUCCESS",
            "created": T0,
            "started": T0 + 320,
            "ended": T0 + 380,
        },
    }
    first, second = report.windows(T0, 600, 300, seen, files, rss, runs)
    assert (first.commits, second.commits, second.not_visible) == (300, 301, 1)
    assert first.p50 == first.p95 == first.max == 1
    assert second.p50 == 30
    assert first.most_files == {"mirror": (9, "orders"), "change log": (1, "orders")}
    assert first.storage == {"mirror": 15 * MB, "change log": MB, "total": 16 * MB}
    assert first.rss == {"daemon": 100, "run worker": 80} and first.workers == 2
    assert (first.runs_ok, second.runs_ok, second.runs_failed) == (1, 1, ["bad"])
    assert second.maintenance_seconds == [60]


def test_a_short_tail_joins_the_last_window() -> None:
    assert report.window_bounds(900, 300) == [(0, 300), (300, 600), (600, 900)]
    assert report.window_bounds(1000, 300) == [(0, 300), (300, 600), (600, 1000)]
    assert report.window_bounds(1100, 300)[-1] == (900, 1100)


def window(index: int, p50: float, p95: float, **more: object) -> report.Window:
    w = report.Window(index, (index - 1) * 300.0, index * 300.0, p50=p50, p95=p95)
    for key, value in more.items():
        setattr(w, key, value)
    return w


def test_freshness_is_judged_after_the_catch_up_only() -> None:
    found = [window(1, 5, 10), window(2, 40, 90), window(3, 6, 12), window(4, 7, 12)]
    assert report.judge_freshness(found, 650).status == report.PASS  # window 2 left out
    assert report.judge_freshness(found, 250).status == report.MISS  # window 2 counts
    assert report.judge_freshness(found, None).status == report.MISS  # never caught up
    assert report.judge_freshness(found, 1000).status == report.NOT_JUDGED
    drifted = [*found[:3], window(4, 7, 12.6)]  # 1.26x the first window's p95
    verdict = report.judge_freshness(drifted, 650)
    assert verdict.status == report.MISS and "1.26x" in verdict.detail
    empty = [*found[:3], window(4, math.nan, math.nan)]  # no commit seen: not a pass
    assert report.judge_freshness(empty, 650).status == report.MISS


def test_files_memory_and_failures_against_their_targets() -> None:
    files = {"change log": (64, "a"), "mirror": (10, "b"), "history": (64, "c")}
    assert report.judge_files([window(1, 1, 1, most_files=files)]).status == report.PASS
    over = {**files, "history": (65, "products")}
    verdict = report.judge_files(
        [window(1, 1, 1, most_files=files), window(2, 1, 1, most_files=over)]
    )
    assert verdict.status == report.MISS and "products, window 2" in verdict.detail
    no_history = {k: v for k, v in files.items() if k != "history"}
    assert report.judge_files([window(1, 1, 1, most_files=no_history)]).status == report.MISS

    roles = dict.fromkeys(report.JUDGED_ROLES, 100.0)
    grown = {**roles, "run worker": 111.0}
    steady = [window(i, 1, 1, rss=roles) for i in (1, 2, 3)]
    assert report.judge_memory(steady).status == report.NOT_JUDGED  # the third is the last
    assert (
        report.judge_memory([*steady, window(4, 1, 1, rss={**roles, "daemon": 109.0})]).status
        == report.PASS
    )
    verdict = report.judge_memory([*steady, window(4, 1, 1, rss=grown)])
    assert verdict.status == report.MISS and "run worker" in verdict.detail

    runs = {
        "k": {"job": "demo_sync", "status": "FAILURE", "started": 10.0, "ended": 20.0},
        "o": {"job": "demo_sync", "status": "FAILURE", "started": 95.0, "ended": 130.0},
        "x": {"job": "demo_sync", "status": "FAILURE", "started": 300.0, "ended": 310.0},
        "m": {"job": "demo_maintenance", "status": "FAILURE", "started": 100.0, "ended": 110.0},
        "s": {"job": "demo_sync", "status": "SUCCESS", "started": 1.0, "ended": 2.0},
    }
    events = {"kill_worker": {"run_id": "k"}, "outage": {"stopped": 100.0, "restarted": 220.0}}
    classified = report.classify_failures(runs, events)
    assert classified == {"killed": ["k"], "outage": ["o"], "maintenance": ["m"], "other": ["x"]}
    assert report.judge_failures(classified).status == report.MISS
    excused = {**classified, "maintenance": [], "other": []}
    assert report.judge_failures(excused).status == report.PASS


def sample(at: float, kinds: dict[str, int], ages: list[float] = ()) -> dict:  # type: ignore[assignment]
    rows = [{"kind": k, "table": "t", "bytes": v} for k, v in kinds.items()]
    rows.append({"kind": "history", "table": "orders", "bytes": 1, "not_live_ages": list(ages)})
    return {"at": at, "tables": rows}


@pytest.mark.parametrize(("end_bytes", "status"), [(109, report.PASS), (111, report.MISS)])
def test_storage_must_be_flat_over_the_last_twenty_minutes(end_bytes: int, status: str) -> None:
    duration = 90 * 60.0
    files = [
        sample(
            T0 + at * 60, {"change log": 100 * MB, "mirror": (end_bytes if at > 80 else 100) * MB}
        )
        for at in range(0, 91, 5)
    ]
    assert report.judge_storage(files, T0, duration, 600).status == status
    # a quick run cannot tell: history kept + VACUUM's hour + the 20 minutes measured
    assert report.judge_storage(files, T0, 15 * 60, 600).status == report.NOT_JUDGED


def test_a_history_must_not_keep_files_vacuum_should_have_deleted() -> None:
    allowed = 3600 + 2 * 300
    fresh = [sample(T0, {}, ages=[10.0, allowed - 1])]
    stale = [sample(T0, {}, ages=[allowed + 1])]
    assert report.judge_history_files(fresh, 90 * 60, 600, 300).status == report.PASS
    verdict = report.judge_history_files(stale, 90 * 60, 600, 300)
    assert verdict.status == report.MISS and "orders 1" in verdict.detail
    assert report.judge_history_files(stale, 15 * 60, 600, 300).status == report.NOT_JUDGED


def test_catch_up_and_the_last_check() -> None:
    assert report.judge_catch_up(59.0, True).status == report.PASS
    assert report.judge_catch_up(61.0, True).status == report.MISS
    assert report.judge_catch_up(None, True).status == report.MISS
    assert report.judge_catch_up(None, False).status == report.NOT_JUDGED
    assert report.judge_equal({"mirror a": "equal", "history a": "equal"}).status == report.PASS
    assert (
        report.judge_equal({"mirror a": "equal", "history a": "2 rows only"}).status == report.MISS
    )
    assert report.judge_equal({}).status == report.MISS
