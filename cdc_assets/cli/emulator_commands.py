"""``cdc-assets emulator create|agent|serve|sql|status PATH``: the embedded CDC demo source
created, its capture agent run in the foreground, served over TDS to SQL Server clients (ODBC
Driver 18, FreeTDS, sqlcmd), a T-SQL script run on it (``sql PATH FILE``, as ``sqlcmd -i``), its
CDC state reported; ``workload`` is in :mod:`.workload_command`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import IO

from .emulator_monitor import (
    StatusLine,
    cdc_enabled,
    lsn_text,
    open_emulator,
    read_max_lsn,
    require_emulator_db,
)
from .usage import PROG, Parser, UsageError, non_negative_int
from .workload_command import add_workload_parser


def add_emulator_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``emulator`` group: create, workload, agent, serve, status."""
    emu = commands.add_parser(
        "emulator", help="create, drive and inspect an embedded CDC source (SQLite file)"
    )
    sub = emu.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    create = sub.add_parser(
        "create", help="create the demo database (CDC on, seeded tables, captured)"
    )
    create.add_argument("path", type=Path, metavar="PATH")
    create.add_argument("--seed", type=non_negative_int, default=0, help="random seed (0)")
    create.add_argument(
        "--rows", type=non_negative_int, default=1000, help="initial rows per table (1000)"
    )
    create.add_argument("--force", action="store_true", help="replace an existing file")
    create.set_defaults(handler=_cmd_create)

    add_workload_parser(sub)

    agent = sub.add_parser("agent", help="run the capture agent until Ctrl-C")
    agent.add_argument("path", type=Path, metavar="PATH")
    agent.set_defaults(handler=_cmd_agent)

    serve = sub.add_parser(
        "serve", help="serve the database over TDS to SQL Server clients until Ctrl-C"
    )
    serve.add_argument("path", type=Path, metavar="PATH")
    serve.add_argument("--port", type=non_negative_int, default=1433, help="TCP port (1433)")
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

    sql = sub.add_parser(
        "sql",
        help="run a T-SQL script (GO-separated batches, as sqlcmd -i) with the capture agent on",
    )
    sql.add_argument("path", type=Path, metavar="PATH", help="the emulator database (created)")
    sql.add_argument("script", type=Path, metavar="FILE", help="the script ('-': standard input)")
    sql.add_argument(
        "-v",
        dest="variables",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a scripting variable $(NAME) (as sqlcmd -v; else :setvar, else the environment)",
    )
    sql.set_defaults(handler=_cmd_sql)

    status = sub.add_parser("status", help="max LSN, capture instances, change rows, jobs")
    status.add_argument("path", type=Path, metavar="PATH")
    status.set_defaults(handler=_cmd_status)


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
    from cdc_assets import emulator
    from cdc_assets.workload import DEMO_TABLES, create_demo_database

    started = time.monotonic()
    conn = open_emulator(path)
    try:
        workload = create_demo_database(conn, seed=args.seed, rows_per_table=args.rows)
        # What SQL Server is seconds after sp_cdc_enable_table: its capture job has scanned the
        # log, so every capture instance is established (a code location lists the tables) and
        # the initial rows are in the change tables.
        while emulator.scan(path) > 0:
            pass
        max_lsn = read_max_lsn(conn)
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
        f"max LSN {lsn_text(max_lsn)}: captured, every capture instance established (changes "
        f"from now on are captured while '{PROG} emulator workload {path}' or "
        f"'{PROG} emulator agent {path}' runs)\n"
    )
    return 0


def _cmd_serve(args: argparse.Namespace, out: IO[str]) -> int:
    """Serve the database over TDS until Ctrl-C; the password comes from the environment."""
    import os

    path: Path = args.path
    require_emulator_db(path)
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
    require_emulator_db(path)
    from cdc_assets import emulator

    monitor = open_emulator(path)
    agent = emulator.CaptureAgent(path)
    line = StatusLine(out, 1.0, 10.0)
    try:
        if not cdc_enabled(monitor):
            raise UsageError(
                f"{path}: CDC is not enabled (create it with '{PROG} emulator create')"
            )
        agent.start()
        out.write(f"capture agent on {path}; Ctrl-C stops it\n")
        out.flush()
        try:
            while agent.running:
                if line.due():
                    max_lsn = read_max_lsn(monitor)
                    line.show(
                        f"{agent.scans:>8,} scans {agent.captured:>10,} transactions captured  "
                        f"max LSN {lsn_text(max_lsn)}"
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


def _cmd_sql(args: argparse.Namespace, out: IO[str]) -> int:
    """Run a script as ``sqlcmd -b -i`` would, the database's capture agent running meanwhile
    (as SQL Server Agent does): results, row counts, messages and errors printed; exit status 1
    at the first failing batch (``:on error ignore`` runs on)."""
    import sys

    from cdc_assets import emulator
    from cdc_assets.emulator.batches.script import ScriptError, parse_script, run_script

    variables = {}
    for given in args.variables:
        name, sep, value = given.partition("=")
        if not sep or not name:
            raise UsageError(f"-v {given}: write NAME=VALUE")
        variables[name] = value
    try:
        text = sys.stdin.read() if str(args.script) == "-" else args.script.read_text()
    except OSError as exc:
        raise UsageError(f"{args.script}: {exc.strerror}") from None
    try:
        script = parse_script(text, variables)
    except ScriptError as exc:
        raise UsageError(f"{args.script}: {exc}") from None
    args.path.parent.mkdir(parents=True, exist_ok=True)
    conn = emulator.connect(args.path, autocommit=True)
    failed = False
    try:
        with emulator.CaptureAgent(args.path):
            for outcome in run_script(conn, script, (emulator.Error,)):
                for names, rows in outcome.results:
                    out.write(" | ".join(names) + "\n")
                    for row in rows:
                        out.write(" | ".join("NULL" if v is None else str(v) for v in row) + "\n")
                    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''} affected)\n")
                for text_line in outcome.messages:
                    out.write(text_line + "\n")
                if outcome.error is not None:
                    failed = True
                    number, state, severity = emulator.errors.number_state_severity(outcome.error)
                    out.write(
                        f"Msg {number}, Level {severity}, State {state}, line "
                        f"{outcome.batch.line}: {emulator.errors.error_text(outcome.error)}\n"
                    )
    finally:
        conn.close()
    return 1 if failed else 0


def _cmd_status(args: argparse.Namespace, out: IO[str]) -> int:
    path: Path = args.path
    require_emulator_db(path)
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

    conn = open_emulator(path)
    try:
        database = database_info(conn)
        out.write(
            f"database {database.name} ({path}): "
            f"CDC {'enabled' if database.cdc_enabled else 'not enabled'}, "
            f"snapshot isolation {'ON' if database.snapshot_isolation else 'OFF'}\n"
        )
        if not database.cdc_enabled:
            return 0
        max_lsn = read_max_lsn(conn)
        when = map_lsn_to_time(conn, max_lsn) if max_lsn else None
        out.write(
            f"max LSN  {lsn_text(max_lsn)}"
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
                lsn_text(i.start_lsn),
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
