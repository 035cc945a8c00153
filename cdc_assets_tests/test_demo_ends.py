"""``make demo`` leaves nothing running, however it ends.

Each test starts ``make demo`` in a fresh copy of the repository (the README's command, on free
ports), waits for the Dagster UI, ends it one way a user would, and asserts that no process of
its process tree, nor of any session it started, is left, and that its ports are free:

- the terminal closed: ``make demo`` typed into an interactive shell on a pseudo-terminal, whose
  other side is then closed (the shell gets SIGHUP and passes it to its jobs);
- SIGTERM to ``make`` while a run is in progress (its terminal line then says it was stopped
  with the demo, and for how long);
- Ctrl-C while ``make demo | tee`` runs, the pipe's reader gone first;
- one of its processes killed (the Spark Connect server's JVM, ``kill -9``): the demo says which,
  with its log's tail, and stops the rest;
- ``make`` killed (``kill -9``): the demo sees its parent go.

The copy's source is created by the first start and reused by the next ones (as a user's second
``make demo`` does). While the first demo runs, a second ``make demo`` in the same folder, and one
in another folder on the same ports, each say in one line why they cannot start.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import re
import select
import signal
import subprocess
import sys
import termios
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from cdc_assets.process_group import ProcessInfo, descendants, listens, live, processes
from cdc_assets_tests.support.fresh_copy import fresh_copy
from cdc_assets_tests.support.net import free_port

UI_TIMEOUT = 240
STOP_TIMEOUT = 150


@dataclass
class Demo:
    """A ``make demo`` started by a test: its starter process, ports and everything seen below
    it (pid and start time: a process, even if its pid is reused later)."""

    root: int  # the process the test started (make, a shell, or bash -c '... | tee')
    clone: Path
    ports: dict[str, int]
    output: Path
    seen: dict[tuple[int, int], ProcessInfo] = field(default_factory=dict)
    # where this demo's lines start in .demo/logs/demo.log (the copy's earlier demos wrote above)
    log_start: int = field(init=False)

    def __post_init__(self) -> None:
        self.log_start = len(_text(self.clone / ".demo/logs/demo.log"))

    def look(self) -> list[ProcessInfo]:
        tree = descendants(self.root)
        for p in tree:
            self.seen[(p.pid, p.start_ticks)] = p
        return tree

    def sessions(self) -> set[int]:
        return {p.sid for p in self.seen.values()}

    def left(self) -> list[ProcessInfo]:
        sessions = self.sessions()
        return [
            p
            for p in live(processes())
            if (p.pid, p.start_ticks) in self.seen or (p.sid in sessions and p.sid != os.getsid(0))
        ]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['DEMO_PORT']}"

    def ui_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/server_info", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def find(self, pattern: str) -> ProcessInfo:
        matches = [p for p in self.look() if re.search(pattern, p.command)]
        assert matches, f"no process of the demo matches {pattern!r}"
        return matches[0]


def _env(ports: dict[str, int]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CDC_ASSETS_CONFIG", "DAGSTER_HOME", "CDC_ASSETS_SPARK_REMOTE"}
        # as from a terminal, not as a sub-make of `make test` ("make[1]: ...")
        and k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"}
        and not k.startswith("PYTEST")
    }
    # A small, slow workload: what is measured is how the demo ends, not the sync.
    env.update({name: str(port) for name, port in ports.items()}, DEMO_ROWS="50", DEMO_TPS="2")
    return env


def _ports() -> dict[str, int]:
    return {name: free_port() for name in ("DEMO_PORT", "DEMO_TDS_PORT", "DEMO_SPARK_PORT")}


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_copy(tmp_path_factory.mktemp("demo_ends") / "clone")


def _wait_for_ui(demo: Demo, exited: Callable[[], bool]) -> None:
    deadline = time.monotonic() + UI_TIMEOUT
    while time.monotonic() < deadline:
        demo.look()
        assert not exited(), f"the demo ended before its UI answered:\n{_text(demo.output)}"
        if demo.ui_answers():
            break
        time.sleep(1)
    else:
        raise AssertionError(f"no UI after {UI_TIMEOUT} s:\n{_text(demo.output)}")
    # Dagster's code server and daemon are up by now; the sensor's runs start within seconds:
    # look once more so the run workers are among what must be gone at the end.
    time.sleep(3)
    demo.look()


def _wait_for_a_run_in_progress(demo: Demo, since: datetime.datetime) -> None:
    """Until a run asked for after ``since`` (the sensor's snapshot run, first) is in progress."""
    deadline = time.monotonic() + UI_TIMEOUT
    while time.monotonic() < deadline:
        with DagsterInstance.from_config(str(demo.clone / ".demo/dagster_home")) as instance:
            started = RunsFilter(statuses=[DagsterRunStatus.STARTED], created_after=since)
            if instance.get_runs(started, limit=1):
                return
        time.sleep(0.5)
    raise AssertionError(f"no run in progress after {UI_TIMEOUT} s:\n{_demo_log(demo)}")


def _text(path: Path) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")
    return ""


def _demo_log(demo: Demo) -> str:
    """This demo's lines of ``.demo/logs/demo.log``."""
    return _text(demo.clone / ".demo/logs/demo.log")[demo.log_start :]


def _assert_nothing_left(demo: Demo) -> None:
    deadline = time.monotonic() + STOP_TIMEOUT
    while (left := demo.left()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for p in left:  # do not leave them to the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    assert not left, (
        "left running: "
        + "; ".join(f"{p.pid} (session {p.sid}) {p.command[:80]}" for p in left)
        + f"\n{_text(demo.output)}\ndemo.log:\n{_demo_log(demo)}"
    )
    for name, port in demo.ports.items():
        assert not listens("127.0.0.1", port), f"{name} {port} still answers after the demo ended"
    log = _demo_log(demo)
    assert "demo: stopped; 'make demo' continues from here" in log, log
    order = [log.find(f"demo: {what} stopped") for what in ("Dagster", "Spark Connect server")]
    order += [log.find("demo: TDS server stopped"), log.find("demo: workload stopped")]
    assert -1 not in order and order == sorted(order), f"not stopped in order:\n{log}"


@contextlib.contextmanager
def _make_demo(clone: Path, command: list[str], **popen: object) -> Iterator[Demo]:
    ports = _ports()
    output = clone / f"demo-{time.monotonic_ns()}.out"
    with output.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=clone,
            env=_env(ports),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **popen,  # type: ignore[arg-type]
        )
    demo = Demo(process.pid, clone, ports, output)
    try:
        _wait_for_ui(demo, lambda: process.poll() is not None)
        yield demo
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_TIMEOUT)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_sigterm_to_make_stops_everything_and_a_second_demo_says_why_it_cannot_start(
    clone: Path, tmp_path: Path
) -> None:
    started = datetime.datetime.now(datetime.UTC)
    with _make_demo(clone, ["make", "demo"]) as demo:
        # A second demo in the same folder: one line, before it touches the source.
        again = subprocess.run(
            ["make", "demo"], cwd=clone, env=_env(_ports()), capture_output=True, text=True
        )
        assert again.returncode == 2
        assert "demo: another demo is running in this folder (pid" in again.stderr, again.stderr
        # ... and one in another folder on the same ports.
        other = fresh_copy(tmp_path / "other")
        taken = subprocess.run(
            ["make", "demo"], cwd=other, env=_env(demo.ports), capture_output=True, text=True
        )
        assert taken.returncode == 2
        assert re.search(
            r"demo: 127\.0\.0\.1:\d+ \(the Dagster UI's port\) is already in use; .* "
            r"DEMO_PORT=\d+ make demo",
            taken.stderr,
        ), taken.stderr
        assert not (other / ".demo/source.db").exists()
        _wait_for_a_run_in_progress(demo, started)
        os.kill(demo.root, signal.SIGTERM)
    _assert_nothing_left(demo)
    log = _demo_log(demo)
    assert "demo: stopping: SIGTERM" in log
    # the run the stop ended says so, with how long it ran (not "FAILURE after ?")
    assert re.search(r"demo: run \S+: stopped with the demo after \d+ s", log), log
    assert "FAILURE after ?" not in log, log


def test_ctrl_c_with_the_output_pipe_gone_stops_everything(clone: Path) -> None:
    with _make_demo(clone, ["bash", "-c", "make demo | tee demo.tee"]) as demo:
        tee = demo.find(r"^tee demo\.tee")
        os.kill(tee.pid, signal.SIGINT)  # the reader goes first ...
        time.sleep(0.5)
        os.killpg(demo.root, signal.SIGINT)  # ... then the terminal's Ctrl-C reaches the rest
    _assert_nothing_left(demo)
    assert re.search(r"demo: stopping: (Ctrl-C|its output was closed)", _demo_log(demo))


def test_a_killed_process_of_the_demo_is_reported_and_the_demo_stops(clone: Path) -> None:
    with _make_demo(clone, ["make", "demo"]) as demo:
        spark = demo.find(r"java .*SparkConnectServer")
        os.kill(spark.pid, signal.SIGKILL)
    _assert_nothing_left(demo)
    out = _text(demo.output)
    assert re.search(
        rf"demo: the Spark Connect server \(pid {spark.pid}\) was killed by SIGKILL on its own; "
        r"the last lines of \S+spark-connect\.log:",
        out,
    ), out
    assert "demo: stopping: the Spark Connect server ended" in out
    assert re.search(r"make(\[\d+\])?: \*\*\* \[Makefile", out)  # the demo failed: make says so


def test_make_killed_stops_everything(clone: Path) -> None:
    with _make_demo(clone, ["make", "demo"]) as demo:
        os.kill(demo.root, signal.SIGKILL)
    _assert_nothing_left(demo)
    assert "demo: stopping: its parent (pid" in _demo_log(demo)


def test_the_terminal_closed_stops_everything(clone: Path) -> None:
    """``make demo`` typed into an interactive bash on a pseudo-terminal; then the terminal's
    side of it is closed, as when its window is: the kernel hangs the terminal up."""
    master, slave = os.openpty()
    ports = _ports()

    def controlling_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"],
        cwd=clone,
        env={**_env(ports), "PS1": "$ ", "TERM": "dumb"},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=controlling_terminal,
    )
    os.close(slave)
    screen = clone / f"terminal-{time.monotonic_ns()}.out"
    reading = threading.Event()
    reading.set()

    def read_screen() -> None:
        with screen.open("ab") as out:
            while reading.is_set():
                if select.select([master], [], [], 0.2)[0]:
                    try:
                        out.write(os.read(master, 65536))
                        out.flush()
                    except OSError:
                        return

    reader = threading.Thread(target=read_screen, daemon=True)
    reader.start()
    demo = Demo(shell.pid, clone, ports, screen)
    try:
        os.write(master, b"make demo\n")
        _wait_for_ui(demo, lambda: shell.poll() is not None)
        reading.clear()
        reader.join()
        os.close(master)  # the terminal window closes
        _assert_nothing_left(demo)
        # whichever it sees first: the shell's SIGHUP, the shell gone, or its terminal gone
        assert re.search(
            r"demo: stopping: (SIGHUP|its parent|its output was closed)", _demo_log(demo)
        )
    finally:
        if shell.poll() is None:
            shell.kill()
        shell.wait(10)


def test_the_headless_demo_stops_when_its_parent_is_killed(clone: Path) -> None:
    """``cdc-assets demo --headless`` (one process and its Spark driver's JVM) from a shell that
    is killed: it stops as on Ctrl-C once the run in flight ends (the kernel's parent-death
    signal, or its check of its parent between runs)."""
    output = clone / "headless.out"
    with output.open("wb") as out:
        shell = subprocess.Popen(
            ["bash", "-c", ".venv/bin/cdc-assets demo --headless --seconds 300; echo done"],
            cwd=clone,
            env=_env(_ports()),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    demo = Demo(shell.pid, clone, {}, output)
    try:
        deadline = time.monotonic() + UI_TIMEOUT
        while "run 1:" not in _text(output):  # Spark is up and the sync runs
            demo.look()
            assert shell.poll() is None and time.monotonic() < deadline, _text(output)
            time.sleep(0.5)
        tree = demo.look()
        assert any(
            p.command.startswith("/usr/lib/jvm") or " java " in f" {p.command}" for p in tree
        )
        os.kill(shell.pid, signal.SIGKILL)
        shell.wait()
        # a run in flight ends first (Dagster holds the signal back until then): up to a minute
        # or two on a busy machine
        deadline = time.monotonic() + 240
        while (left := demo.left()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not left, [p.command[:80] for p in left]
        assert "cdc-assets: interrupted" in _text(output)
    finally:
        for p in demo.left():
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)


def test_a_process_left_by_an_earlier_demo_is_named_before_anything_starts(tmp_path: Path) -> None:
    """What demo.sh runs before it touches the source: a process an earlier demo recorded that
    still runs (its starter killed with kill -9, say) is named, with the command that stops it;
    once it is gone, the check passes."""
    left = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (tmp_path / ".demo").mkdir()
        ticks = next(p.start_ticks for p in processes() if p.pid == left.pid)
        (tmp_path / ".demo/demo.pids").write_text(f"workload {left.pid} {ticks}\ntds 1 1\n")
        ports = _ports()
        check = [
            *(str(Path(sys.executable)), "-m", "cdc_assets.demo_processes", "check"),
            *("--source", ".demo/source.db", "--port", str(ports["DEMO_PORT"])),
            *("--tds-port", str(ports["DEMO_TDS_PORT"])),
        ]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        found = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert found.returncode == 2
        assert found.stderr == (
            f"demo: processes of an earlier demo still run: workload (pid {left.pid}); stop "
            f"them with 'kill -- -{left.pid}' and start the demo again\n"
        )
        left.kill()
        left.wait()
        again = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert again.returncode == 0, again.stderr
    finally:
        if left.poll() is None:
            left.kill()
            left.wait()
