"""The ``cdc-assets`` command line.

``cdc-assets emulator create|workload|agent|status PATH`` creates the embedded CDC demo source,
drives it with the workload generator (with live LSN progress), runs its capture agent in the
foreground, and reports its CDC state; ``cdc-assets emulator serve PATH`` serves it over TDS to
SQL Server clients (ODBC Driver 18, FreeTDS, sqlcmd). Errors a user can meet (missing file, not
an emulator database, bad arguments) print one line and exit with status 2.

Imports of what a command dispatches to are lazy, so ``--help`` is fast and this module does not
pull in the emulator (or anything heavier) until needed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

from cdc_assets.process_group import die_with_parent, raise_keyboard_interrupt, stop_on_signals

if TYPE_CHECKING:
    from cdc_assets.emulator import Connection
    from cdc_assets.lsn import Lsn
    from cdc_assets.workload import WorkloadStats

EXIT_FAILURE = 1
EXIT_USAGE = 2
PROG = "cdc-assets"


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (``--help`` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# -- helpers --------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of 0 or more, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def _require_emulator_db(path: Path) -> None:
    """Refuse anything but an existing emulator database, without modifying the file."""
    if not path.exists():
        raise UsageError(f"{path}: no such file (create it with '{PROG} emulator create {path}')")
    if not path.is_file():
        raise UsageError(f"{path}: not a file")
    from cdc_assets.emulator import is_emulator_database

    if not is_emulator_database(path):
        raise UsageError(f"{path}: not a cdc_assets emulator database")


def _connect(path: Path) -> Connection:
    from cdc_assets import emulator

    return emulator.connect(path, autocommit=True)


# Every T-SQL statement below goes through a function of cdc_assets.sqlserver (imported lazily).


def _max_lsn(conn: Connection) -> Lsn | None:
    from cdc_assets.sqlserver import find_max_lsn

    return find_max_lsn(conn)


def _lsn_text(value: Lsn | None) -> str:
    return "-" if value is None else value.hex


def _cdc_enabled(conn: Connection) -> bool:
    from cdc_assets.sqlserver import database_info

    return database_info(conn).cdc_enabled


def _captured(conn: Connection, max_lsn: Lsn | None) -> bool:
    """This connection's last commit is at or below ``max_lsn`` (captured)."""
    own = getattr(conn, "last_commit_lsn", None)
    return not isinstance(own, bytes) or (max_lsn is not None and own <= max_lsn.raw)


def _capture_lag(conn: Connection, stats: WorkloadStats, max_lsn: Lsn | None) -> float | None:
    """Seconds between the workload's last commit and the commit time of the max LSN."""
    from cdc_assets.sqlserver import map_lsn_to_time

    last = stats.last_commit_at
    if last is None or max_lsn is None:
        return None
    if isinstance(getattr(conn, "last_commit_lsn", None), bytes) and _captured(conn, max_lsn):
        return 0.0
    captured = map_lsn_to_time(conn, max_lsn)
    if not isinstance(captured, dt.datetime):
        return None
    return max(0.0, (last - captured).total_seconds())


class _Line:
    """One status line, rewritten in place on a terminal; plain lines elsewhere."""

    def __init__(self, stream: IO[str], interval_tty: float, interval_plain: float) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.interval = interval_tty if self.tty else interval_plain
        self._last = 0.0
        self._shown = False

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def show(self, text: str) -> None:
        self._last = time.monotonic()
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


# -- commands -------------------------------------------------------------------------------


def _cmd_create(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    if path.exists() and not path.is_file():
        raise UsageError(f"{path}: exists and is not a file")
    if path.exists():
        if not args.force:
            raise UsageError(f"{path}: already exists (use --force to replace it)")
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    from cdc_assets.workload import DEMO_TABLES, create_demo_database

    started = time.monotonic()
    conn = _connect(path)
    try:
        workload = create_demo_database(conn, seed=args.seed, rows_per_table=args.rows)
        max_lsn = _max_lsn(conn)
    except BaseException:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        raise
    conn.close()
    elapsed = time.monotonic() - started
    out.write(f"created {path} in {elapsed:.1f} s (seed {args.seed})\n")
    for table in DEMO_TABLES:
        out.write(
            f"  {table.quoted:<22} {workload.row_count(table):>8} rows  "
            f"capture instance {table.capture_instance}"
            f"{'' if table.has_key else ' (no primary key, no net changes)'}\n"
        )
    out.write(
        f"max LSN {_lsn_text(max_lsn)} (the initial load is captured once the agent runs: "
        f"'{PROG} emulator workload {path}' or '{PROG} emulator agent {path}')\n"
    )
    return 0


def _wait_for_capture(conn: Connection, timeout: float) -> Lsn | None:
    """Wait (up to ``timeout`` s) until the max LSN reaches this connection's last commit."""
    deadline = time.monotonic() + timeout
    while True:
        max_lsn = _max_lsn(conn)
        if _captured(conn, max_lsn):
            return max_lsn
        if time.monotonic() >= deadline:
            return max_lsn
        time.sleep(0.05)


def _cmd_workload(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    _require_emulator_db(path)
    from cdc_assets import emulator
    from cdc_assets.workload import DEMO_TABLES, Workload

    conn = _connect(path)
    monitor = _connect(path)
    agent = None
    try:
        if not _cdc_enabled(conn):
            raise UsageError(
                f"{path}: CDC is not enabled (create it with '{PROG} emulator create')"
            )
        missing = [t.quoted for t in DEMO_TABLES if _table_missing(conn, t.schema, t.name)]
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
        line = _Line(out, 0.25, 5.0)
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
            max_lsn = _max_lsn(monitor)
            lag = _capture_lag(conn, stats, max_lsn)
            rate = stats.transactions / stats.elapsed if stats.elapsed > 0 else 0.0
            line.show(
                f"{stats.transactions:>8,} tx {stats.rows:>10,} rows {rate:>7.1f} tx/s  "
                f"max LSN {_lsn_text(max_lsn)}  "
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
        max_lsn = _wait_for_capture(conn, 3.0) if agent is not None else None
        if max_lsn is None:
            max_lsn = _max_lsn(monitor)
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


def _table_missing(conn: Connection, schema: str, name: str) -> bool:
    from cdc_assets.sqlserver import table_exists

    return not table_exists(conn, schema, name)


def _summary(
    out: IO[str],
    stats: WorkloadStats,
    elapsed: float,
    max_lsn: Lsn | None,
    conn: Connection,
    stopped: bool,
) -> None:
    rate = stats.transactions / elapsed if elapsed > 0 else 0.0
    lag = _capture_lag(conn, stats, max_lsn)
    out.write(
        f"{'stopped' if stopped else 'done'}: {stats.transactions:,} transactions committed, "
        f"{stats.rolled_back:,} rolled back, {stats.rows:,} rows changed "
        f"({stats.inserted:,} inserted, {stats.updated:,} updated, {stats.deleted:,} deleted) "
        f"in {elapsed:.1f} s ({rate:.1f} tx/s); max LSN {_lsn_text(max_lsn)}"
        f"{'' if lag is None else f', capture lag {lag:.1f} s'}\n"
    )
    out.flush()


def _cmd_serve(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve the database over TDS until Ctrl-C; the password comes from the environment."""
    import os

    path: Path = args.path
    _require_emulator_db(path)
    password = os.environ.get(args.password_env)
    if not password:
        raise UsageError(
            f"set the environment variable {args.password_env} to the password of login "
            f"{args.user!r} (it is never taken from the command line)"
        )
    from cdc_assets.tds_server import TdsServer

    server = TdsServer(
        path,
        logins={args.user: password},
        database=args.database,
        host=args.host,
        port=args.port,
        tls=not args.no_tls,
    )
    try:
        server.start()
    except OSError as exc:
        raise UsageError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror}); choose another --port"
        ) from None
    encrypt = "Encrypt=no" if args.no_tls else "Encrypt=yes;TrustServerCertificate=yes"
    out.write(
        f"serving {path} as database {server.database!r} on {args.host}:{server.port} over TDS "
        f"(login {args.user!r}, password from ${args.password_env}); Ctrl-C stops it\n"
        f"  ODBC: SERVER=tcp:{args.host},{server.port};DATABASE={server.database};"
        f"UID={args.user};{encrypt}\n"
        f"  sqlcmd -S tcp:{args.host},{server.port} -d {server.database} -U {args.user} -C\n"
    )
    out.flush()
    server.serve_forever()
    return 0


def _cmd_agent(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    _require_emulator_db(path)
    from cdc_assets import emulator

    monitor = _connect(path)
    agent = emulator.CaptureAgent(path)
    line = _Line(out, 1.0, 10.0)
    try:
        if not _cdc_enabled(monitor):
            raise UsageError(
                f"{path}: CDC is not enabled (create it with '{PROG} emulator create')"
            )
        agent.start()
        out.write(f"capture agent on {path}; Ctrl-C stops it\n")
        out.flush()
        try:
            while agent.running:
                if line.due():
                    max_lsn = _max_lsn(monitor)
                    line.show(
                        f"{agent.scans:>8,} scans {agent.captured:>10,} transactions captured  "
                        f"max LSN {_lsn_text(max_lsn)}"
                        f"{f'  errors {len(agent.errors)}' if agent.errors else ''}"
                    )
                time.sleep(0.1)
        except KeyboardInterrupt:
            pass
        line.finish()
        out.write(f"agent stopped: {agent.scans:,} scans, {agent.captured:,} transactions\n")
        return 0
    finally:
        agent.stop()
        monitor.close()


def _cmd_status(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    _require_emulator_db(path)
    from cdc_assets.sqlserver import (
        count_change_rows,
        database_info,
        discover,
        get_cdc_jobs,
        get_job_running,
        get_last_scan,
        map_lsn_to_time,
    )
    from cdc_assets.sqlserver.quoting import quote_table

    conn = _connect(path)
    try:
        database = database_info(conn)
        out.write(
            f"database {database.name} ({path}): "
            f"CDC {'enabled' if database.cdc_enabled else 'not enabled'}, "
            f"snapshot isolation {'ON' if database.snapshot_isolation else 'OFF'}\n"
        )
        if not database.cdc_enabled:
            return 0
        max_lsn = _max_lsn(conn)
        when = map_lsn_to_time(conn, max_lsn) if max_lsn else None
        out.write(
            f"max LSN  {_lsn_text(max_lsn)}"
            f"{f' (committed {when:%Y-%m-%d %H:%M:%S.%f}'[:-3] + ')' if when else ''}\n"
        )
        for job in get_cdc_jobs(conn).values():
            state = "started" if get_job_running(conn, job.job_type) else "stopped"
            if job.job_type == "capture":
                detail = (
                    f"pollinginterval {job.polling_interval_s} s, maxtrans {job.maxtrans}, "
                    f"maxscans {job.maxscans}"
                )
            else:
                detail = f"retention {job.retention_minutes} min, threshold {job.threshold}"
            out.write(f"{job.job_type} job  {state}: {detail}\n")
        scan = get_last_scan(conn)
        if scan is not None and scan.end_time is not None:
            out.write(
                f"last scan  session {scan.session_id} at {scan.end_time:%Y-%m-%d %H:%M:%S}: "
                f"{scan.tran_count} transactions, {scan.command_count} commands, "
                f"latency {scan.latency_s} s, {scan.error_count} errors\n"
            )
        else:
            out.write("last scan  none yet (run the capture agent)\n")
        instances = [i for table in discover(conn).values() for i in table.instances]
        if not instances:
            out.write("no capture instances\n")
            return 0
        rows = [
            (
                i.name,
                quote_table(i.source_schema, i.source_table),
                _lsn_text(i.start_lsn),
                f"{count_change_rows(conn, i.name):,}",
                "all + net" if i.supports_net_changes else "all",
            )
            for i in instances
        ]
        headers = ("capture instance", "source", "min LSN", "change rows", "functions")
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
        for record in (headers, *rows):
            cells = [
                cell.rjust(w) if i == 3 else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(record, widths, strict=True))
            ]
            out.write("  ".join(cells).rstrip() + "\n")
        return 0
    finally:
        conn.close()


# -- the parser -----------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="SQL Server CDC as Dagster assets: tools for the embedded CDC emulator.",
    )
    commands = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    emu = commands.add_parser(
        "emulator", help="create, drive and inspect an embedded CDC source (SQLite file)"
    )
    sub = emu.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    create = sub.add_parser("create", help="create the demo database (CDC on, seeded tables)")
    create.add_argument("path", type=Path, metavar="PATH")
    create.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (0)")
    create.add_argument(
        "--rows", type=_non_negative_int, default=1000, help="initial rows per table (1000)"
    )
    create.add_argument("--force", action="store_true", help="replace an existing file")
    create.set_defaults(handler=_cmd_create)

    work = sub.add_parser("workload", help="run transactions with live LSN progress")
    work.add_argument("path", type=Path, metavar="PATH")
    limit = work.add_mutually_exclusive_group()
    limit.add_argument("--seconds", type=_positive_float, help="stop after this many seconds")
    limit.add_argument("--transactions", type=_positive_int, help="stop after N transactions")
    work.add_argument("--seed", type=_non_negative_int, default=1, help="random seed (1)")
    work.add_argument("--tps", type=_positive_float, help="at most N transactions per second")
    work.add_argument(
        "--burst-rows", type=_positive_int, default=500, help="rows in a burst transaction (500)"
    )
    work.add_argument(
        "--no-capture", action="store_true", help="do not run the capture agent meanwhile"
    )
    work.add_argument(
        "--max-rows",
        type=_positive_int,
        help="keep every table at about N rows: a fuller table gets deletes (no limit)",
    )
    work.add_argument(
        "--retention-minutes",
        type=_positive_int,
        help="set the cleanup job's retention (SQL Server's default: 4320, three days)",
    )
    work.add_argument(
        "--cleanup-every",
        type=_positive_float,
        default=3600.0,
        help="seconds between the capture agent's cleanup runs (3600)",
    )
    work.set_defaults(handler=_cmd_workload)

    agent = sub.add_parser("agent", help="run the capture agent until Ctrl-C")
    agent.add_argument("path", type=Path, metavar="PATH")
    agent.set_defaults(handler=_cmd_agent)

    serve = sub.add_parser(
        "serve", help="serve the database over TDS to SQL Server clients until Ctrl-C"
    )
    serve.add_argument("path", type=Path, metavar="PATH")
    serve.add_argument("--port", type=_non_negative_int, default=1433, help="TCP port (1433)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--database", help="database name clients ask for (the file's stem)")
    serve.add_argument("--user", default="sa", help="SQL login name (sa)")
    serve.add_argument(
        "--password-env",
        default="CDC_EMULATOR_PASSWORD",
        help="environment variable holding the login's password (CDC_EMULATOR_PASSWORD)",
    )
    serve.add_argument("--no-tls", action="store_true", help="offer no encryption")
    serve.set_defaults(handler=_cmd_serve)

    status = sub.add_parser("status", help="max LSN, capture instances, change rows, jobs")
    status.add_argument("path", type=Path, metavar="PATH")
    status.set_defaults(handler=_cmd_status)

    check = commands.add_parser(
        "check",
        help="load the configuration and discover its sources, as the code location does",
    )
    check.add_argument(
        "config",
        type=Path,
        nargs="?",
        metavar="CONFIG",
        help="the config file ($CDC_ASSETS_CONFIG, else ./cdc_assets.yaml)",
    )
    check.set_defaults(handler=_cmd_check)

    convert = commands.add_parser(
        "convert",
        help="write a cdc_assets.yaml's sources as dg component instances (one defs.yaml each)",
    )
    convert.add_argument(
        "config",
        type=Path,
        nargs="?",
        metavar="CONFIG",
        help="the config file ($CDC_ASSETS_CONFIG, else ./cdc_assets.yaml)",
    )
    convert.add_argument(
        "--to",
        type=Path,
        required=True,
        metavar="DEFS_DIR",
        help="the dg project's defs folder: <DEFS_DIR>/<source>/defs.yaml is written per source",
    )
    convert.add_argument(
        "--project-root",
        type=Path,
        default=Path("."),
        help="the dg project's root (relative paths are rewritten relative to it; default: .)",
    )
    convert.set_defaults(handler=_cmd_convert)

    demo = commands.add_parser(
        "demo", help="continuous sync of the demo source, verified (--headless: one process)"
    )
    demo.add_argument(
        "--headless",
        action="store_true",
        help="run sensor ticks and runs in this process instead of the Dagster UI",
    )
    demo.add_argument("--seconds", type=_positive_float, default=30.0, help="workload time (30)")
    demo.add_argument(
        "--workdir", type=Path, default=Path(".demo/headless"), help="scratch dir (.demo/headless)"
    )
    demo.add_argument("--rows", type=_non_negative_int, default=300, help="rows per table (300)")
    demo.add_argument("--tps", type=_positive_float, default=20.0, help="transactions/s (20)")
    demo.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (0)")
    demo.set_defaults(handler=_cmd_demo)
    return parser


def _cmd_check(args: argparse.Namespace, out: IO[str]) -> int:
    """The code location's load, without Dagster's processes: one line either way."""
    from cdc_assets.config import config_path
    from cdc_assets.dagster.code_location import CodeLocationError, load_definitions

    try:
        _defs, sources, components = load_definitions(args.config)
    except CodeLocationError as exc:
        raise UsageError(str(exc)) from None
    found = "; ".join(
        f"source {s.name!r}: "
        + (f"unreachable ({c.unreachable}), as recorded: " if c.unreachable else "")
        + f"{len(s.tables)} tables"
        f" ({', '.join(f'{t.schema}.{t.name}' for t in s.tables) or 'none'})"
        for s, c in zip(sources, components, strict=True)
    )
    out.write(f"{config_path(args.config)}: ok; {found}\n")
    return 0


def _cmd_convert(args: argparse.Namespace, out: IO[str]) -> int:
    """A cdc_assets.yaml as component instances; one line per file written, then what next."""
    from cdc_assets.config import ConfigError, config_path
    from cdc_assets.config_convert import convert

    try:
        written = convert(args.config, args.to, args.project_root.resolve())
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    for item in written:
        out.write(f"wrote {item.path}: source {item.source!r} as cdc_assets.SqlServerCdcSource\n")
    out.write(
        f"{config_path(args.config)} was left as it was; the project loads the new defs.yaml "
        "files (check them: dg check defs). cdc_assets.definitions loads a cdc_assets.yaml "
        "instead of its defs folder while CDC_ASSETS_CONFIG names one or one is in the working "
        "directory.\n"
    )
    return 0


def _cmd_demo(args: argparse.Namespace, out: IO[str]) -> int:
    if not args.headless:
        raise UsageError("the UI demo starts with `make demo`; use --headless to run it here")
    from cdc_assets.dagster.demo.headless_demo import run_headless_demo

    # However it ends, it stops as on Ctrl-C (the workload, the capture agent, then Spark's JVM
    # with this process): SIGTERM, SIGHUP (terminal closed), its parent killed, its output gone.
    # A signal during a run is held back by Dagster until the run ends: the parent is also
    # checked between runs.
    stop_on_signals(raise_keyboard_interrupt)
    parent = os.getppid()
    die_with_parent(signal.SIGTERM)

    def still_wanted() -> None:
        if os.getppid() != parent:
            raise KeyboardInterrupt

    def say(line: str) -> None:
        try:
            out.write(line + "\n")
            out.flush()
        except OSError:  # the pipe's reader or the terminal is gone: nobody watches any more
            raise KeyboardInterrupt from None

    ok = run_headless_demo(
        args.workdir,
        args.seconds,
        rows=args.rows,
        tps=args.tps,
        seed=args.seed,
        say=say,
        still_wanted=still_wanted,
    )
    return 0 if ok else EXIT_FAILURE


def _database_errors() -> tuple[type[BaseException], ...]:
    """Database errors, shown as one line with exit status 1."""
    try:
        from cdc_assets.emulator import Error
        from cdc_assets.sqlserver.errors import SqlServerError
    except ImportError:  # pragma: no cover - both are part of the package
        return (sqlite3.Error,)
    return (Error, SqlServerError, sqlite3.Error)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 usage or user error)."""
    out = sys.stdout
    err = sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    handler: Callable[[argparse.Namespace, IO[str]], int] = args.handler
    try:
        return handler(args, out)
    except UsageError as exc:
        err.write(f"{PROG}: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):  # a closed pipe or terminal may be why
            err.write(f"{PROG}: interrupted\n")
        return 130
    except _database_errors() as exc:
        message = exc.args[1] if len(exc.args) > 1 else str(exc)
        err.write(f"{PROG}: database error: {message}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
