"""A command in a process group (and session) of its own, that ends with whoever started it.

``make demo``, the tests and the benchmarks start long-running commands (``dagster dev``, the
Spark Connect server, the emulator's TDS server and workload) away from the terminal's signals, so
that one Ctrl-C does not reach them all at once and they stop in an order that loses nothing. The
price of a session of one's own is that nothing stops it but its starter; so each command here
gets a parent-death signal (Linux ``PR_SET_PDEATHSIG``): if the starter dies without stopping it
(killed, or crashed), the command gets ``SIGTERM`` from the kernel and shuts down as on a normal
stop. :meth:`ProcessGroup.stop` ends every process of the group: a first signal, patience, then
TERM and KILL.

Linux only in what it adds (``/proc``, ``prctl``); elsewhere the parent-death signal is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when the thread that started it ends (a
    no-op outside Linux). Kept across ``exec``; the caller should still check that its parent is
    the one it expects, since the parent may have died before this call."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start_ticks: int  # when it started (clock ticks since boot): a pid plus this names one process
    command: str


def processes() -> list[ProcessInfo]:
    """Every process of this machine (``/proc``), zombies included (state ``Z``)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_bytes().decode(errors="replace")
            argv = Path(entry.path, "cmdline").read_bytes()
        except OSError:  # it ended while we looked
            continue
        # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
        name_end = raw.rfind(")")
        fields = raw[name_end + 2 :].split()
        command = argv.replace(b"\0", b" ").decode(errors="replace").strip()
        found.append(
            ProcessInfo(
                pid=int(entry.name),
                state=fields[0],
                ppid=int(fields[1]),
                pgid=int(fields[2]),
                sid=int(fields[3]),
                start_ticks=int(fields[19]),
                command=command or raw[raw.find("(") + 1 : name_end],
            )
        )
    return found


def live(found: Sequence[ProcessInfo]) -> list[ProcessInfo]:
    return [p for p in found if not p.state.startswith("Z")]


def descendants(root: int, found: Sequence[ProcessInfo] | None = None) -> list[ProcessInfo]:
    """``root`` and every process below it (children, their children, ...)."""
    found = processes() if found is None else found
    children: dict[int, list[ProcessInfo]] = {}
    for p in found:
        children.setdefault(p.ppid, []).append(p)
    tree = [p for p in found if p.pid == root]
    i = 0
    while i < len(tree):
        tree.extend(children.get(tree[i].pid, []))
        i += 1
    return tree


class ProcessGroup:
    """``args`` in a new session (so a process group) of its own, output to ``log`` (or to
    ``stdout`` when given, e.g. ``subprocess.PIPE``); it gets ``parent_death_signal`` if this
    process dies without stopping it."""

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        *,
        parent_death_signal: int = signal.SIGTERM,
        stdout: int | None = None,
    ) -> None:
        self.args = list(args)
        self.log = log
        with log.open("ab") as out:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=out if stdout is None else stdout,
                stderr=out,
                env=None if env is None else dict(env),
                cwd=cwd,
                start_new_session=True,
                preexec_fn=lambda: die_with_parent(parent_death_signal),
            )
        self.pgid = self.proc.pid

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output(self) -> IO[bytes] | None:
        return self.proc.stdout

    def exited(self) -> int | None:
        """The leader's exit status once it has ended (negative: killed by that signal)."""
        return self.proc.poll()

    def members(self) -> list[str]:
        """``pid command`` of each live process of the group (zombies count as gone)."""
        return [f"{p.pid} {p.command[:70]}" for p in live(processes()) if p.pgid == self.pgid]

    def send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def stop(
        self, patience: float, first: int | None = signal.SIGINT, term_patience: float = 10
    ) -> str:
        """``first`` to the group (none when ``first`` is None: it had one), ``patience`` s for
        all of it to exit, then TERM and KILL; returns what had to be killed ('' when the group
        exited in time)."""
        if first is not None:
            self.send(first)
        self._wait_empty(patience)
        left = self.members()
        if left:
            self.send(signal.SIGTERM)
            self._wait_empty(term_patience)
            self.send(signal.SIGKILL)
            self._wait_empty(5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        return "; ".join(left)

    def _wait_empty(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.proc.poll()  # reap the leader, so that it does not count as a zombie member
            if not self.members():
                return
            time.sleep(0.1)

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def output_gone(fd: int) -> bool:
    """Whether ``fd`` (open for writing) leads nowhere any more: a pipe whose reader exited, or
    a terminal that hung up. A regular file or ``/dev/null`` never goes."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return True
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on ``host:port`` now."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def listens(host: str, port: int) -> bool:
    """Whether something accepts connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def stop_on_signals(stop: Callable[[int], None]) -> None:
    """SIGTERM and SIGHUP call ``stop(signal)`` as Ctrl-C would: a benchmark or test killed by
    its caller, or by a closed terminal, still runs its ``finally`` blocks and stops what it
    started."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: stop(number))


def raise_keyboard_interrupt(_sig: int) -> None:
    raise KeyboardInterrupt
