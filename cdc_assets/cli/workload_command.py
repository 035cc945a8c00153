"""``cdc-assets emulator workload PATH``: the workload generator run on an emulator database, with
its capture agent, live LSN progress and a summary; Ctrl-C stops it between transactions.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .emulator_monitor import (
    StatusLine,
    capture_lag,
    cdc_enabled,
    lsn_text,
    open_emulator,
    read_max_lsn,
    require_emulator_db,
    table_missing,
    wait_for_capture,
)
from .usage import PROG, UsageError, non_negative_int, positive_float, positive_int

if TYPE_CHECKING:
    from cdc_assets.emulator import Connection
    from cdc_assets.lsn import Lsn
    from cdc_assets.workload import WorkloadStats


def add_workload_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``workload`` command of the ``emulator`` group."""
    work = sub.add_parser("workload", help="run transactions with live LSN progress")
    work.add_argument("path", type=Path, metavar="PATH")
    limit = work.add_mutually_exclusive_group()
    limit.add_argument("--seconds", type=positive_float, help="stop after this many seconds")
    limit.add_argument("--transactions", type=positive_int, help="stop after N transactions")
    work.add_argument("--seed", type=non_negative_int, default=1, help="random seed (1)")
    work.add_argument("--tps", type=positive_float, help="at most N transactions per second")
    work.add_argument(
        "--burst-rows", type=positive_int, default=500, help="rows in a burst transaction (500)"
    )
    work.add_argument(
        "--no-capture", action="store_true", help="do not run the capture agent meanwhile"
    )
    work.add_argument(
        "--max-rows",
        type=positive_int,
        help="keep every table at about N rows: a fuller table gets deletes (no limit)",
    )
    work.add_argument(
        "--retention-minutes",
        type=positive_int,
        help="set the cleanup job's retention (SQL Server's default: 4320, three days)",
    )
    work.add_argument(
        "--cleanup-every",
        type=positive_float,
        default=3600.0,
        help="seconds between the capture agent's cleanup runs (3600)",
    )
    work.set_defaults(handler=cmd_workload)


def cmd_workload(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    require_emulator_db(path)
    from cdc_assets import emulator
    from cdc_assets.workload import DEMO_TABLES, Workload

    conn = open_emulator(path)
    monitor = open_emulator(path)
    agent = None
    try:
        if not cdc_enabled(conn):
            raise UsageError(
                f"{path}: CDC is not enabled (create it with '{PROG} emulator create')"
            )
        missing = [t.quoted for t in DEMO_TABLES if table_missing(conn, t.schema, t.name)]
        if missing:
            raise UsageError(f"{path}: the demo tables {', '.join(missing)} are missing")
        workload = Workload(
            conn,
            seed=args.seed,
            tables=DEMO_TABLES,
            burst_rows=args.burst_rows,
            max_rows=args.max_rows,
        )
        if args.retention_minutes is not None:  # what a DBA sets on the cleanup job
            from cdc_assets.sqlserver import set_cleanup_retention

            set_cleanup_retention(conn, args.retention_minutes)
        if not args.no_capture:
            agent = emulator.CaptureAgent(path, cleanup_interval=args.cleanup_every).start()
        line = StatusLine(out, 0.25, 5.0)
        limit = (
            f"{args.transactions} transactions"
            if args.transactions
            else (f"{args.seconds:g} s" if args.seconds else "until Ctrl-C")
        )
        out.write(
            f"workload on {path}: seed {args.seed}, {limit}"
            f"{f', at most {args.tps:g} tx/s' if args.tps else ''}, "
            f"capture agent {'off' if args.no_capture else 'on'}\n"
        )
        out.flush()

        def progress(stats: WorkloadStats, *, force: bool = False) -> None:
            if not force and not line.due():
                return
            max_lsn = read_max_lsn(monitor)
            lag = capture_lag(conn, stats, max_lsn)
            rate = stats.transactions / stats.elapsed if stats.elapsed > 0 else 0.0
            line.show(
                f"{stats.transactions:>8,} tx {stats.rows:>10,} rows {rate:>7.1f} tx/s  "
                f"max LSN {lsn_text(max_lsn)}  "
                f"lag {'-' if lag is None else f'{lag:.1f} s'}"
                f"{'' if agent is not None else ' (no capture)'}"
            )

        interrupted = False
        try:
            with _stop_between_transactions() as stop:

                def step_done(stats: WorkloadStats) -> None:
                    progress(stats)
                    if stop.is_set():
                        raise KeyboardInterrupt

                workload.run(
                    seconds=args.seconds,
                    transactions=args.transactions,
                    on_progress=step_done,
                    tps=args.tps,
                )
        except KeyboardInterrupt:
            interrupted = True
        elapsed = workload.stats.elapsed
        progress(workload.stats, force=True)
        line.finish()
        max_lsn = wait_for_capture(conn, 3.0) if agent is not None else None
        if max_lsn is None:
            max_lsn = read_max_lsn(monitor)
        _summary(out, workload.stats, elapsed, max_lsn, conn, interrupted)
        if agent is not None and agent.errors:
            out.write(f"capture agent errors: {len(agent.errors)}; last: {agent.errors[-1]}\n")
        return 0
    finally:
        if agent is not None:
            agent.stop()
        monitor.close()
        conn.close()


@contextlib.contextmanager
def _stop_between_transactions() -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) sets the event instead of interrupting the statement that runs.

    A KeyboardInterrupt raised inside SQLite (in one of the emulator's Python functions) would
    surface as a database error; the workload stops after the transaction instead. A second
    Ctrl-C interrupts at once. Outside the main thread, or with SIGINT ignored, nothing changes.
    """
    stop = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield stop
        return

    def on_sigint(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _summary(
    out: IO[str],
    stats: WorkloadStats,
    elapsed: float,
    max_lsn: Lsn | None,
    conn: Connection,
    stopped: bool,
) -> None:
    rate = stats.transactions / elapsed if elapsed > 0 else 0.0
    lag = capture_lag(conn, stats, max_lsn)
    out.write(
        f"{'stopped' if stopped else 'done'}: {stats.transactions:,} transactions committed, "
        f"{stats.rolled_back:,} rolled back, {stats.rows:,} rows changed "
        f"({stats.inserted:,} inserted, {stats.updated:,} updated, {stats.deleted:,} deleted) "
        f"in {elapsed:.1f} s ({rate:.1f} tx/s); max LSN {lsn_text(max_lsn)}"
        f"{'' if lag is None else f', capture lag {lag:.1f} s'}\n"
    )
    out.flush()
