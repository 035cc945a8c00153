"""The processes of ``make demo``, started and stopped together: nothing is left running however
the demo ends.

``scripts/demo.sh`` prepares the source and the config, then replaces itself with this module
(``python -m cdc_assets.demo_processes run ...``), which starts, each in a session of its own:

1. the TDS server (``cdc-assets emulator serve``) that serves the source,
2. the workload with the capture agent (``cdc-assets emulator workload``),
3. the Spark Connect server the runs attach to (when the config names one),
4. ``dagster dev`` (webserver, daemon, code server, run workers),
5. the run-line display (``cdc_assets.dagster.demo.run_lines``), whose lines this process prints.

Then it watches. Whatever ends the demo, everything is stopped in the order that loses nothing
(Dagster and its runs first, then Spark, then the source's server and the workload; the run-line
display is told first, so that a run the stop ends says ``stopped with the demo`` with its
duration, not FAILURE) and the terminal, while there is one, gets one line per process:

- Ctrl-C, SIGTERM, SIGHUP (the terminal closed);
- the output closing (``make demo | tee demo.log`` whose ``tee`` ended): nothing can be told any
  more, so nothing should run unseen;
- its parent ending (``make`` killed): the kernel's parent-death signal, and a check every
  half second;
- one of its processes exiting on its own: said with the last lines of its log; the demo does
  not run half.

If this process itself is killed (``kill -9``), each child gets SIGTERM from the kernel
(parent-death signal) and shuts down on its own. Every line also goes to ``.demo/logs/demo.log``.

``python -m cdc_assets.demo_processes check ...`` (run by demo.sh before it touches anything)
says in one line whether the demo's ports are taken or processes of an earlier demo still run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .process_group import (
    ProcessGroup,
    die_with_parent,
    listens,
    live,
    output_gone,
    port_free,
    processes,
)
from .spark_connect_address import spark_connect_address

# Where each process's pid goes while it runs (``name pid start-ticks``): the next demo checks it.
PIDS_FILE = "demo.pids"
_STOP_ORDER = ("dagster", "run_lines", "spark", "tds", "workload")


@dataclass
class Settings:
    root: Path  # the repository (the demo's processes run there)
    demo_dir: Path  # .demo
    source: Path
    host: str
    port: int
    tds_port: int
    tps: str
    seed: int
    max_rows: str
    retention_minutes: str
    spark_remote: str  # '' when the runs start their own Spark
    parent: int  # the pid this process must keep as its parent (make, or the shell)
    venv_bin: Path = field(init=False)

    def __post_init__(self) -> None:
        self.venv_bin = Path(sys.executable).parent

    @property
    def logs(self) -> Path:
        return self.demo_dir / "logs"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def spark_address(self) -> tuple[str, int] | None:
        return spark_connect_address(self.spark_remote)


@dataclass(frozen=True)
class Child:
    """How one of the demo's processes runs and stops."""

    name: str
    label: str  # as the terminal names it
    args: list[str]
    log: Path
    patience: float  # seconds after the first signal before TERM and KILL


class Terminal:
    """Lines for the person running the demo: stdout (or stderr), and the demo's own log. A
    closed pipe or a hung-up terminal swallows them; the log keeps them."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.lock = threading.RLock()  # a signal handler may say a line inside say()

    def say(self, line: str, *, error: bool = False) -> None:
        with self.lock:
            stream = sys.stderr if error else sys.stdout
            with contextlib.suppress(OSError, ValueError):
                stream.write(line + "\n")
                stream.flush()
            with contextlib.suppress(OSError), self.log.open("a") as out:
                out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def gone(self) -> bool:
        return output_gone(sys.stdout.fileno())


def leftovers(demo_dir: Path) -> list[str]:
    """``name pid pgid`` of each process an earlier demo recorded that still runs (the same
    process: pid and start time match)."""
    try:
        lines = (demo_dir / PIDS_FILE).read_text().splitlines()
    except OSError:
        return []
    running = {(p.pid, p.start_ticks): p for p in live(processes())}
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        name, pid, ticks = parts[0], int(parts[1]), int(parts[2])
        if (pid, ticks) in running:
            found.append(f"{name} {pid} {running[(pid, ticks)].pgid}")
    return found


def check(settings: Settings) -> str | None:
    """One line saying why the demo cannot start here now, or None."""
    left = leftovers(settings.demo_dir)
    if left:
        groups = " ".join(f"-{entry.split()[2]}" for entry in left)
        names = ", ".join(f"{entry.split()[0]} (pid {entry.split()[1]})" for entry in left)
        return (
            f"demo: processes of an earlier demo still run: {names}; stop them with "
            f"'kill -- {groups}' and start the demo again"
        )
    ports = [("the Dagster UI", settings.host, settings.port)]
    ports.append(("the TDS server", "127.0.0.1", settings.tds_port))
    spark = settings.spark_address()
    if spark is not None:
        ports.append(("the Spark Connect server", *spark))
    for what, host, port in ports:
        if not port_free(host, port):
            variable = {
                "the Dagster UI": "DEMO_PORT",
                "the TDS server": "DEMO_TDS_PORT",
                "the Spark Connect server": "DEMO_SPARK_PORT",
            }[what]
            return (
                f"demo: {host}:{port} ({what}'s port) is already in use; stop what listens "
                f"there or pick another port, e.g. {variable}={port + 1} make demo"
            )
    return None


class Demo:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.logs.mkdir(parents=True, exist_ok=True)
        self.terminal = Terminal(settings.logs / "demo.log")
        self.groups: dict[str, ProcessGroup] = {}
        self.children: dict[str, Child] = {}
        self.reason: str | None = None  # why the demo stops (set once)
        self.status = 0
        self.died = False  # one of the demo's processes ended on its own

    # -- what ends the demo ------------------------------------------------------------------
    def _on_signal(self, number: int, _frame: object) -> None:
        name = signal.Signals(number).name
        if self.reason is None and os.getppid() != self.settings.parent:
            self.status = 1  # the kernel's parent-death signal: make (or the shell) was killed
            self.reason = f"its parent (pid {self.settings.parent}, e.g. make) ended"
        elif self.reason is None:
            self.reason = {"SIGINT": "Ctrl-C", "SIGHUP": "SIGHUP (the terminal closed)"}.get(
                name, name
            )
        else:
            self.terminal.say("demo: still stopping (Dagster shuts down its runs first)")

    def _watch(self) -> str | None:
        """Why the demo must stop now (a process ended, the parent or the output went), or None."""
        if os.getppid() != self.settings.parent:
            self.status = 1
            return f"its parent (pid {self.settings.parent}, e.g. make) ended"
        if self.terminal.gone():
            self.status = 1
            return "its output was closed (the terminal or the pipe it wrote to)"
        for name, group in self.groups.items():
            code = group.exited()
            if code is not None:
                child = self.children[name]
                self.status, self.died = 1, True
                how = (
                    f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
                )
                tail = "\n".join(f"  {line}" for line in group.tail(10).splitlines())
                self.terminal.say(
                    f"demo: the {child.label} (pid {group.pid}) {how} on its own; the last lines "
                    f"of {child.log}:\n{tail}",
                    error=True,
                )
                return f"the {child.label} ended"
        return None

    def _pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` watching; False when the demo must stop."""
        deadline = time.monotonic() + seconds
        while self.reason is None:
            found = self._watch()
            if found is not None:
                self.reason = found
                break
            if time.monotonic() >= deadline:
                return True
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        return False

    # -- starting ----------------------------------------------------------------------------
    def _start(self, child: Child, *, pipe: bool = False) -> ProcessGroup:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        group = ProcessGroup(
            child.args,
            child.log,
            env,
            self.settings.root,
            parent_death_signal=signal.SIGTERM,
            stdout=-1 if pipe else None,  # subprocess.PIPE
        )
        self.groups[child.name] = group
        self.children[child.name] = child
        self._record_pids()
        return group

    def _record_pids(self) -> None:
        mine = {p.pid: p for p in processes()}
        lines = [
            f"{name} {group.pid} {mine[group.pid].start_ticks}"
            for name, group in self.groups.items()
            if group.pid in mine
        ]
        with contextlib.suppress(OSError):
            (self.settings.demo_dir / PIDS_FILE).write_text("\n".join(lines) + "\n")

    def _wait_until(self, ready: Callable[[], bool], seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return True
            if not self._pause(0.5):
                return False
        return bool(ready())

    def _fail_start(self, child: Child, what: str) -> None:
        group = self.groups[child.name]
        tail = "\n".join(f"  {line}" for line in group.tail(8).splitlines())
        self.terminal.say(f"demo: {what} (last lines of {child.log}):\n{tail}", error=True)
        self.status = 1
        self.reason = self.reason or f"the {child.label} did not start"

    def start_all(self) -> None:
        s, bin_ = self.settings, self.settings.venv_bin
        cli = str(bin_ / "cdc-assets")
        tds = Child(
            "tds",
            "TDS server",
            [
                *(cli, "emulator", "serve", str(s.source), "--port", str(s.tds_port)),
                *("--database", "cdc_demo", "--user", "cdc_reader"),
                *("--password-env", "CDC_DEMO_SOURCE_PASSWORD"),
            ],
            s.logs / "tds-server.log",
            5,
        )
        self.terminal.say(
            f"demo: serving {s.source} over TDS on 127.0.0.1:{s.tds_port} (database cdc_demo, "
            f"login cdc_reader); log in {tds.log}"
        )
        self._start(tds)
        if not self._wait_until(lambda: "over TDS" in self.groups["tds"].tail(50), 15):
            if self.reason is None:
                self._fail_start(tds, "the TDS server did not start (DEMO_TDS_PORT=...?)")
            return

        workload = Child(
            "workload",
            "workload",
            [
                *(cli, "emulator", "workload", str(s.source), "--tps", s.tps),
                *("--seed", str(s.seed + 1), "--max-rows", s.max_rows),
                *("--retention-minutes", s.retention_minutes, "--cleanup-every", "300"),
            ],
            s.logs / "workload.log",
            15,
        )
        self.terminal.say(
            f"demo: starting the workload ({s.tps} tx/s) with the capture agent; log in "
            f"{workload.log}"
        )
        self._start(workload)
        if not self._pause(1):
            return

        address = s.spark_address()
        if address is not None:
            spark = Child(
                "spark",
                "Spark Connect server",
                [str(bin_ / "python"), "-m", "cdc_assets.spark.connect_server"],
                s.logs / "spark-connect.log",
                15,
            )
            self.terminal.say(
                f"demo: starting the Spark Connect server the runs attach to; log in {spark.log}"
            )
            self._start(spark)
            if not self._wait_until(lambda: listens(*address), 240):
                if self.reason is None:
                    self._fail_start(spark, "the Spark Connect server did not start")
                return

        dagster = Child(
            "dagster",
            "Dagster",
            [str(bin_ / "dagster"), "dev", "-w", "workspace.yaml", "-h", s.host, "-p", str(s.port)],
            s.logs / "dagster.log",
            60,
        )
        self.terminal.say(
            f"demo: starting Dagster (DAGSTER_HOME={os.environ.get('DAGSTER_HOME', '')}); the UI "
            f"will be at {s.url}; Dagster's and Spark's full log: {dagster.log}"
        )
        self._start(dagster)
        lines = Child(
            "run_lines",
            "run-line display",
            [str(bin_ / "python"), "-m", "cdc_assets.dagster.demo.run_lines", str(dagster.log)],
            s.logs / "run-lines.log",
            5,
        )
        group = self._start(lines, pipe=True)
        threading.Thread(target=self._forward, args=(group,), daemon=True).start()

    def _forward(self, group: ProcessGroup) -> None:
        """The run-line display's lines, to the terminal."""
        assert group.output is not None
        for raw in group.output:
            self.terminal.say(raw.decode(errors="replace").rstrip("\n"))

    def _ui_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.settings.url}/server_info", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def watch(self) -> None:
        announced = False
        while self._pause(1.0):
            if not announced and "dagster" in self.groups and self._ui_answers():
                announced = True
                self.terminal.say(
                    f"\ndemo: Dagster UI at {self.settings.url} — the sensor demo_sync_sensor "
                    "keeps the mirrors in sync; Ctrl-C stops everything\n"
                )

    # -- stopping ----------------------------------------------------------------------------
    def stop_all(self) -> None:
        self.terminal.say(f"demo: stopping: {self.reason}")
        lines = self.groups.get("run_lines")
        if lines is not None and lines.exited() is None:
            # the runs the stop ends say so ("stopped with the demo"), not FAILURE
            lines.send(signal.SIGUSR1)
        said = {
            "dagster": "Dagster stopped (its log: {log})",
            "spark": "Spark Connect server stopped (its log: {log})",
            "tds": "TDS server stopped (its log: {log})",
            "workload": "workload stopped: {last}",
            "run_lines": "",
        }
        for name in _STOP_ORDER:
            group = self.groups.get(name)
            if group is None:
                continue
            child = self.children[name]
            if group.exited() is None:
                first: int | None = signal.SIGTERM if name == "run_lines" else signal.SIGINT
                patience = child.patience
                if name == "dagster" and self.died:  # its runs may hang on the dead process
                    patience = min(patience, 20)  # (a Spark Connect server, say): less time
            else:  # its leader is down (dagster dev: its run workers may still be recording an
                first, patience = None, min(child.patience, 20)  # interrupted run): no Ctrl-C
            killed = group.stop(patience, first)
            if killed:
                self.terminal.say(
                    f"demo: had to kill what was left of the {child.label}: {killed}", error=True
                )
            if said[name]:
                last = group.tail(1) or "(no log)"
                self.terminal.say("demo: " + said[name].format(log=child.log, last=last))
        with contextlib.suppress(OSError):
            (self.settings.demo_dir / PIDS_FILE).unlink()
        self.terminal.say("demo: stopped; 'make demo' continues from here")

    def run(self) -> int:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        die_with_parent(signal.SIGTERM)
        try:
            if self._pause(0):
                self.start_all()
            if self.reason is None:
                self.watch()
        finally:
            self.stop_all()
        return self.status


def _settings(args: argparse.Namespace) -> Settings:
    root = Path.cwd()
    return Settings(
        root=root,
        demo_dir=root / ".demo",
        source=Path(args.source),
        host=args.host,
        port=args.port,
        tds_port=args.tds_port,
        tps=args.tps,
        seed=args.seed,
        max_rows=args.max_rows,
        retention_minutes=args.retention_minutes,
        spark_remote=args.spark_remote,
        parent=args.parent,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="make demo's processes (run by scripts/demo.sh)")
    parser.add_argument("action", choices=["check", "run"])
    parser.add_argument("--source", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    parser.add_argument("--tds-port", type=int, default=14330)
    parser.add_argument("--tps", default="20")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-rows", default="3000")
    parser.add_argument("--retention-minutes", default="10")
    parser.add_argument("--spark-remote", default="")
    parser.add_argument("--parent", type=int, default=os.getppid())
    args = parser.parse_args(argv)
    settings = _settings(args)
    if args.action == "check":
        problem = check(settings)
        if problem:
            print(problem, file=sys.stderr)
            return 2
        return 0
    return Demo(settings).run()


if __name__ == "__main__":
    sys.exit(main())
