"""Benchmark: the whole system at once, for an hour and a half (issue 57): ``make demo``'s
processes and configuration at 20 transactions/s with a history on every table and column rules
on ``customers``, faults injected on a fixed schedule, and per 5-minute window how fresh the
mirrors are, how many files and bytes the Delta tables hold, how much memory each process holds
and which runs failed; at the end every mirror and history against the source, and the issue's
targets judged: one ``PASS``/``MISS``/``NOT JUDGED`` line each.

    .venv/bin/python benchmarks/soak.py              # 90 minutes (the full run)
    .venv/bin/python benchmarks/soak.py --quick      # 15 minutes
    .venv/bin/python benchmarks/soak.py --minutes 6  # a smoke run: the schedule scaled down

What runs (:mod:`soak_setup`): in a folder of its own (``.soak`` unless ``--dir``), on free
ports, what ``scripts/demo.sh`` sets up and starts for ``make demo`` — a new emulated source,
``make demo``'s ``dagster.yaml`` (warm run workers, the run queue) and its config (the demo's
``defs.yaml`` with the source over TDS), then the TDS server, the workload with the capture
agent, the Spark Connect server and ``dagster dev``, started, watched and stopped by
:mod:`cdc_assets.demo_processes` (whatever ends the soak — its end, Ctrl-C, SIGTERM, a process
dying — stops them all). On top: ``history: {include: ["*"]}``, a hash and a redact rule on
``customers`` (the key in ``CDC_SOAK_HASH_KEY``, a fresh random value), and the maintenance
schedule every ``--maintenance-minutes`` (5, as the issue measured; the demo runs it every 10).
The soak's clock starts once every mirror and history exists.

The schedule (times for the 90-minute run; shorter runs scale it: faults at the same fractions
of the run, windows and the outage at most 5 and 2 minutes, shorter for a run under 15):
minute 30 a column added to ``orders`` with a second capture instance, 34 a column rule of
``customers`` changed (config edited, code location reloaded), 38 a run worker killed in a sync
run, 42 the TDS server stopped for 2 minutes. The faults all come before the outage, so the
windows after its catch-up show the system settled after all of them.

What it prints (:mod:`soak_report`), and writes with its raw samples to ``<dir>/soak-report.txt``
and ``<dir>/soak-samples.json``:

- per window: commit → mirror p50/p95/max (a transaction's commit time in
  ``cdc.lsn_time_mapping`` → the first second at which the mirror of every table it changed was
  at or past its LSN, as the sync reads it: ``sync_state.mirror_at``); the most live data files
  of any change log, mirror and history (from their Delta logs) and which table; storage bytes
  per kind and in total; each long-lived process's RSS (median of the window's samples; run
  workers: the largest, and how many); the runs that ended, and the maintenance runs' seconds;
- each injected fault, when and what it did; every failed run and Dagster's reason; the
  seconds from the TDS server's restart until everything committed before it was in its
  mirrors; the last check of every mirror and history (:mod:`soak_verify`);
- one line per target of the issue.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # the project code of this checkout

import soak_report as report  # noqa: E402
from _common import capture, machine_line  # noqa: E402
from freshness_report import percentile  # noqa: E402
from soak_faults import add_column, kill_worker, reload_location  # noqa: E402
from soak_samples import Recorder, last_commit_lsn, lsn_hex, runs_in_flight  # noqa: E402
from soak_setup import (  # noqa: E402
    Ports,
    SoakConfig,
    SoakProcesses,
    change_rule,
    emulator_config,
    hold_folder,
    prepare,
)
from soak_verify import verify  # noqa: E402

from cdc_assets import emulator  # noqa: E402
from cdc_assets.config import duration_seconds, load_config  # noqa: E402
from cdc_assets.dagster.history import history_position  # noqa: E402
from cdc_assets.dagster.sync.names import sync_job_name  # noqa: E402
from cdc_assets.dagster.sync.source import Source, load_source  # noqa: E402
from cdc_assets.process_group import listens, port_free  # noqa: E402
from cdc_assets_tests.support.dagster_dev import DagsterDev, server_answers  # noqa: E402

FULL_MINUTES = 90.0
QUICK_MINUTES = 15.0
KILL_PATIENCE = 120.0  # seconds the worker kill waits for a sync run in flight


@dataclass(frozen=True)
class Schedule:
    """When things happen, in seconds after the soak's clock starts."""

    duration: float
    window: float
    add_column: float
    rule_change: float
    kill_worker: float
    outage: float
    outage_seconds: float

    @classmethod
    def for_minutes(cls, minutes: float) -> Schedule:
        total = minutes * 60
        scale = min(1.0, minutes / QUICK_MINUTES)  # under 15 minutes, windows and outage shrink
        return cls(
            duration=total,
            window=300 * scale,
            add_column=total * 30 / 90,
            rule_change=total * 34 / 90,
            kill_worker=total * 38 / 90,
            outage=total * 42 / 90,
            outage_seconds=120 * scale,
        )


class Soak:
    """The soak's loop, run by :class:`SoakProcesses` in place of the demo's watch."""

    def __init__(self, cfg: SoakConfig, schedule: Schedule, ports: Ports, args: Any) -> None:
        self.cfg, self.schedule, self.ports, self.args = cfg, schedule, ports, args
        self.events: dict[str, Any] = {}
        self.t0: float | None = None
        self.ended: float | None = None  # when the schedule ended (its end, or a stop)
        self.recorder: Recorder | None = None
        self.source: Source | None = None
        self.setup: dict[str, float] = {}
        self.final: dict[str, Any] = {}
        self.results: dict[str, str] = {}
        self.printed = 0  # windows printed while running

    # -- the loop ------------------------------------------------------------------------------
    def __call__(self, demo: SoakProcesses) -> None:
        try:
            self.soak(demo)
        except Exception as exc:  # the report is still written, the processes still stopped
            self.final["error"] = traceback.format_exc()
            demo.say(f"soak: failed: {type(exc).__name__}: {exc} (the traceback is in the JSON)")
            demo.end("the soak failed")
        finally:  # what was in flight when the soak ended, before the processes stop
            if self.recorder is not None:
                self.recorder.stop()
                with contextlib.suppress(Exception):
                    self.final["in_flight"] = self.in_flight()

    def in_flight(self) -> list[dict[str, Any]]:
        from dagster import DagsterInstance

        with DagsterInstance.from_config(str(self.cfg.home)) as instance:
            return runs_in_flight(instance)

    def soak(self, demo: SoakProcesses) -> None:
        began = time.monotonic()
        url = f"http://127.0.0.1:{self.ports.ui}"
        if not demo.wait_until(lambda: server_answers(url), 300):
            demo.end(demo.reason or "the Dagster UI did not answer within 300 s")
            return
        self.setup["UI answers"] = time.monotonic() - began
        demo.say(f"soak: Dagster UI at {url}; waiting for every mirror and history")
        self.source = load_source(
            load_config(emulator_config(self.cfg)).sources[0], self.cfg.storage
        )
        self.recorder = Recorder(
            self.source,
            self.cfg.source_db,
            self.cfg.home,
            lambda: {name: group.pid for name, group in list(demo.groups.items())},
            self.args.sample_seconds,
        ).start()
        if not demo.wait_until(self.built, self.args.setup_timeout):
            demo.end(demo.reason or f"the mirrors were not built in {self.args.setup_timeout} s")
            return
        self.setup["every mirror and history built"] = time.monotonic() - began
        self.t0 = time.time()
        demo.say(
            f"soak: every mirror and history built after "
            f"{self.setup['every mirror and history built']:.0f} s; the soak's clock starts "
            f"({self.schedule.duration / 60:g} minutes)"
        )
        self.run_schedule(demo)
        self.ended = time.time()
        if demo.stopping():
            return
        self.finish(demo)
        demo.end("the soak is over")

    def built(self) -> bool:
        assert self.source is not None and self.recorder is not None
        if not self.recorder.positions or min(self.recorder.positions[-1][1]) < 0:
            return False
        return all(history_position(self.source, t) for t in self.source.history_tables)

    def now(self) -> float:
        assert self.t0 is not None
        return time.time() - self.t0

    def run_schedule(self, demo: SoakProcesses) -> None:
        s = self.schedule
        due = [
            (s.add_column, self.add_column),
            (s.rule_change, self.change_rule),
            (s.kill_worker, self.kill_worker),
            (s.outage, self.stop_source),
            (s.outage + s.outage_seconds, self.restart_source),
        ]
        while demo.pause(1.0):
            elapsed = self.now()
            if elapsed >= s.duration:
                return
            while due and elapsed >= due[0][0]:
                if not due[0][1](demo):  # not done yet (no run in flight to kill): next second
                    break
                due.pop(0)
            self.print_live_windows(demo)

    def event(self, demo: SoakProcesses, name: str, facts: dict[str, Any]) -> None:
        facts = {"at": time.time(), **facts}
        self.events[name] = facts
        demo.say(f"soak {report.clock(self.now())}: {facts['line']}")

    # -- the faults ----------------------------------------------------------------------------
    def add_column(self, demo: SoakProcesses) -> bool:
        try:
            facts = add_column(self.cfg.source_db)
        except Exception as exc:
            facts = {"line": f"adding the column failed: {exc}"}
        self.event(demo, "add_column", facts)
        return True

    def change_rule(self, demo: SoakProcesses) -> bool:
        what = change_rule(self.cfg)
        dev = DagsterDev(
            f"http://127.0.0.1:{self.ports.ui}",
            self.cfg.home,
            self.cfg.logs / "dagster.log",
            demo.groups["dagster"],
        )
        try:
            facts = reload_location(dev)
        except Exception as exc:
            facts = {"line": f"reload failed: {exc}", "ok": False}
        facts["line"] = f"column rule changed ({what}); {facts['line']}"
        self.event(demo, "rule_change", facts)
        return True

    def kill_worker(self, demo: SoakProcesses) -> bool:
        assert self.source is not None
        facts = kill_worker(self.cfg.home, sync_job_name(self.source.name))
        if facts is None and self.now() < self.schedule.kill_worker + KILL_PATIENCE:
            return False  # no sync run in flight this second: the next one
        if facts is None:
            facts = {"line": f"no sync run in flight for {KILL_PATIENCE:.0f} s: no worker killed"}
        self.event(demo, "kill_worker", facts)
        return True

    def stop_source(self, demo: SoakProcesses) -> bool:
        demo.stop_process("tds")
        self.events["outage"] = {"stopped": time.time()}
        demo.say(f"soak {report.clock(self.now())}: TDS server stopped")
        return True

    def restart_source(self, demo: SoakProcesses) -> bool:
        outage = self.events["outage"]
        outage["restarted"] = time.time()
        outage["last_lsn_before"] = last_commit_lsn(self.cfg.source_db)
        demo.wait_until(lambda: port_free("127.0.0.1", self.ports.tds), 60)
        demo.restart_process("tds")
        started = demo.wait_until(lambda: listens("127.0.0.1", self.ports.tds), 60)
        outage["line"] = (
            f"TDS server stopped at {report.clock(outage['stopped'] - (self.t0 or 0))}, started "
            f"again {outage['restarted'] - outage['stopped']:.0f} s later"
            + ("" if started else " (it did not listen within 60 s)")
        )
        demo.say(f"soak {report.clock(self.now())}: {outage['line']}")
        return True

    # -- the end -------------------------------------------------------------------------------
    def finish(self, demo: SoakProcesses) -> None:
        """Stop the workload, let capture and the sync reach the last commit, compare."""
        assert self.source is not None and self.recorder is not None
        ended = time.time()
        demo.stop_process("workload")
        capture(self.cfg.source_db)  # everything committed
        # the capture agent ran in the workload's process: one here keeps the capture job
        # running, as SQL Server's would (the capture_health checks see it scan)
        agent = emulator.CaptureAgent(self.cfg.source_db).start()
        try:
            self.drain_and_compare(demo, ended)
        finally:
            agent.stop()

    def drain_and_compare(self, demo: SoakProcesses, ended: float) -> None:
        assert self.source is not None and self.recorder is not None
        last = last_commit_lsn(self.cfg.source_db)
        self.final = {"workload_stopped": ended, "last_lsn": last}
        demo.say(f"soak {report.clock(self.now())}: workload stopped; waiting for every mirror")
        began = time.monotonic()

        def at_last() -> bool:
            positions = self.recorder.positions if self.recorder else []
            return bool(positions) and min(positions[-1][1]) >= last

        reached = demo.wait_until(at_last, self.args.drain_timeout)
        self.final["drain_seconds"] = time.monotonic() - began if reached else None
        self.recorder.sample_commits()
        if demo.stopping():
            return
        if not reached:
            names = [t.name for t in self.source.tables]
            at = self.recorder.positions[-1][1] if self.recorder.positions else []
            self.final["mirrors_at"] = {n: lsn_hex(x) for n, x in zip(names, at, strict=False)}
            demo.say(
                "soak: the mirrors did not reach the last commit in "
                f"{self.args.drain_timeout:.0f} s"
            )
            return
        demo.say(
            f"soak: every mirror at the last commit after {self.final['drain_seconds']:.0f} s; "
            "comparing with the source"
        )
        checked = load_source(load_config(emulator_config(self.cfg)).sources[0], self.cfg.storage)
        self.results = verify(checked, demo.stopping)

    # -- printing ------------------------------------------------------------------------------
    def seen(self) -> list[report.CommitSeen]:
        assert self.recorder is not None and self.source is not None
        names = [t.instance.name for t in self.source.tables]
        r = self.recorder
        return report.commits_seen(dict(r.commits), list(r.positions), names)

    def windows(self, duration: float, seen: list[report.CommitSeen]) -> list[report.Window]:
        assert self.recorder is not None and self.t0 is not None
        r = self.recorder
        return report.windows(
            self.t0, duration, self.schedule.window, seen, list(r.files), list(r.rss), dict(r.runs)
        )

    def print_live_windows(self, demo: SoakProcesses) -> None:
        """A window's lines a minute after it ended (its last commits visible by then)."""
        done = int((self.now() - 60) // self.schedule.window)
        if done <= self.printed or self.recorder is None:
            return
        for w in self.windows(done * self.schedule.window, self.seen())[self.printed : done]:
            for line in report.window_lines(w):
                demo.say(line)
        self.printed = done


def judged(soak: Soak, cfg: SoakConfig, keep_history: float) -> tuple[list[str], dict[str, Any]]:
    """The final report's lines and the summary for the JSON."""
    lines: list[str] = []
    r, s = soak.recorder, soak.schedule
    if r is None or soak.t0 is None or soak.source is None:
        return ["soak: ended before its clock started; nothing to report"], {}
    duration = min(s.duration, (soak.ended or time.time()) - soak.t0)
    seen = soak.seen()
    found = soak.windows(duration, seen)
    lines.append(
        f"\nsoak: {duration / 60:.1f} minutes, {len(found)} windows of {s.window / 60:g} min"
    )
    for w in found:
        lines.extend(report.window_lines(w))
    lines.append("events:")
    for name, facts in sorted(
        soak.events.items(), key=lambda kv: kv[1].get("at") or kv[1].get("stopped", 0)
    ):
        at = facts.get("at") or facts.get("stopped")
        lines.append(f"  {report.clock(at - soak.t0)} {name}: {facts.get('line', '')}")
    outage = soak.events.get("outage", {})
    catch_up = None
    settled = None
    if "restarted" in outage:
        catch_up = report.catch_up_seconds(seen, outage["restarted"])
        if catch_up is not None:
            settled = outage["restarted"] - soak.t0 + catch_up
        lines.append(
            "  catch-up after the outage: "
            + (f"{catch_up:.1f} s" if catch_up is not None else "not reached by the end")
        )
    classified = report.classify_failures(r.runs, soak.events)
    lines.append("failed runs:" if any(classified.values()) else "failed runs: none")
    for cause, ids in classified.items():
        for run_id in ids:
            run = r.runs[run_id]
            at = report.clock((run.get("ended") or run["created"]) - soak.t0)
            lines.append(
                f"  {at} [{cause}] {run['job']} {run.get('partition') or ''} {run_id[:8]}: "
                f"{run.get('failure') or run['status']}"
            )
            lines.extend(f"      {c}" for c in run.get("failed_checks", [])[:3])
    if "last_lsn" in soak.final:
        drain = soak.final.get("drain_seconds")
        when = f"{drain:.0f} s" if drain is not None else f"(never: {soak.final.get('mirrors_at')})"
        lines.append(
            f"after the workload stopped: every mirror at the last commit "
            f"({lsn_hex(soak.final['last_lsn'])}) after {when}"
        )
    lines.append("the last check:" if soak.results else "the last check: not made")
    lines.extend(f"  {k}: {v}" for k, v in soak.results.items())
    for run in soak.final.get("in_flight", []):
        lines.append(
            f"  still in flight at the end: {run['job']} {run.get('partition') or ''} "
            f"{run['run_id'][:8]} {run['status']} since {report.clock(run['created'] - soak.t0)}"
        )
    if r.position_seconds:
        lines.append(
            f"mirror positions read every second; a read took p50 "
            f"{percentile(r.position_seconds, 0.5):.2f} s, max "
            f"{max(r.position_seconds):.2f} s (the resolution of commit → mirror)"
        )
    if r.errors:
        lines.append(f"samples that failed (by what): {r.errors}")
    if "error" in soak.final:
        lines.append(f"the soak failed: {soak.final['error'].splitlines()[-1]}")
    interval = cfg.maintenance_minutes * 60
    verdicts = [
        report.judge_freshness(found, settled if "restarted" in outage else 0.0),
        report.judge_files(found),
        report.judge_memory(found),
        report.judge_storage(r.files, soak.t0, duration, keep_history),
        report.judge_history_files(r.files, duration, keep_history, interval),
        report.judge_catch_up(catch_up, "restarted" in outage),
        report.judge_failures(classified),
        report.judge_equal(soak.results),
    ]
    lines.append("targets (issue 57):")
    lines.extend(f"  {v.line()}" for v in verdicts)
    summary = {
        "windows": [asdict(w) for w in found],
        "catch_up_seconds": catch_up,
        "failed_runs": classified,
        "verdicts": [asdict(v) for v in verdicts],
    }
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=FULL_MINUTES, help="length (90)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_MINUTES:g} minutes")
    parser.add_argument("--dir", type=Path, default=ROOT / ".soak", help="its folder (.soak)")
    parser.add_argument("--tps", type=float, default=20.0, help="transactions/s (20)")
    parser.add_argument("--rows", type=int, default=1000, help="initial rows per table (1000)")
    parser.add_argument("--max-rows", type=int, default=3000, help="rows per table at most")
    parser.add_argument("--retention-minutes", type=int, default=10, help="CDC cleanup's (10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--maintenance-minutes", type=int, default=5, help="maintenance every ... minutes (5)"
    )
    parser.add_argument("--sample-seconds", type=float, default=20.0)
    parser.add_argument("--setup-timeout", type=float, default=900.0)
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    minutes = QUICK_MINUTES if args.quick else args.minutes
    schedule = Schedule.for_minutes(minutes)
    folder = args.dir.resolve()
    cfg = SoakConfig(
        folder,
        args.tps,
        args.rows,
        args.max_rows,
        args.retention_minutes,
        args.seed,
        args.maintenance_minutes,
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(hold_folder(folder))
        ports = Ports.free()
        settings, config = prepare(cfg, ports)
        source = config["sources"][0]
        keep_history = duration_seconds(source["maintenance"]["keep_history"])
        header = [
            machine_line(),
            f"soak: {minutes:g} minutes in {folder}: make demo's processes and config "
            f"(scripts/demo.sh, cdc_assets/defs/demo/defs.yaml) at {args.tps:g} tx/s, "
            f"{args.rows} rows per table (at most {args.max_rows}), CDC cleanup keeping "
            f"{args.retention_minutes} min",
            f"  history on every table; column rules {source['columns']['rules']}; maintenance "
            f"{source['maintenance']}; sync {source['sync']}",
            f"  schedule (min:s after every mirror and history is built): windows of "
            f"{report.clock(schedule.window)}, column added {report.clock(schedule.add_column)}, "
            f"rule changed {report.clock(schedule.rule_change)}, run worker killed "
            f"{report.clock(schedule.kill_worker)}, TDS server stopped "
            f"{report.clock(schedule.outage)} for {report.clock(schedule.outage_seconds)}",
            f"  ports: UI {ports.ui}, TDS {ports.tds}, Spark Connect {ports.spark}",
        ]
        print("\n".join(header), flush=True)
        soak = Soak(cfg, schedule, ports, args)
        processes = SoakProcesses(settings, soak, cfg.logs / "run-lines.out")
        status = processes.run()
        if soak.recorder is not None:
            soak.recorder.stop()
        lines, summary = judged(soak, cfg, keep_history)
        lines.append(machine_line())
        print("\n".join(lines), flush=True)
        (folder / "soak-report.txt").write_text("\n".join(header + lines) + "\n")
        write_samples(folder / "soak-samples.json", soak, summary, header)
        print(
            f"soak: report in {folder / 'soak-report.txt'}, samples in "
            f"{folder / 'soak-samples.json'}"
        )
        missed = any(v["status"] == report.MISS for v in summary.get("verdicts", []))
        return status or (1 if missed else 0)


def write_samples(path: Path, soak: Soak, summary: dict[str, Any], header: list[str]) -> None:
    r = soak.recorder

    data = {
        "header": header,
        "t0": soak.t0,
        "schedule": asdict(soak.schedule),
        "setup_seconds": soak.setup,
        "events": soak.events,
        "final": soak.final,
        "results": soak.results,
        "tables": [t.instance.name for t in soak.source.tables] if soak.source else [],
        "positions": r.positions if r else [],
        "position_seconds": r.position_seconds if r else [],
        "commits": [[lsn, at, tables] for lsn, (at, tables) in sorted(r.commits.items())]
        if r
        else [],
        "files": r.files if r else [],
        "rss": r.rss if r else [],
        "runs": r.runs if r else {},
        "sample_errors": r.errors if r else {},
        "summary": summary,
    }
    path.write_text(json.dumps(_without_nan(data)))


def _without_nan(value: Any) -> Any:
    """``value`` with every float nan (a window without commits) as null: JSON has no nan."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _without_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nan(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
