"""The ``cdc-assets`` command line: its parser and ``main`` (the console script's entry point).

``cdc-assets emulator create|workload|agent|status PATH`` creates the embedded CDC demo source,
drives it with the workload generator (with live LSN progress), runs its capture agent in the
foreground, and reports its CDC state; ``cdc-assets emulator serve PATH`` serves it over TDS to
SQL Server clients (ODBC Driver 18, FreeTDS, sqlcmd). Errors a user can meet (missing file, not
an emulator database, bad arguments) print one line and exit with status 2.

One module per command group: :mod:`.emulator_commands` (with :mod:`.workload_command` and
:mod:`.emulator_monitor`, what they share), :mod:`.project_commands` (check, convert, demo), over
:mod:`.usage`. Imports of what a command dispatches to are lazy, so ``--help`` is fast and the
command line does not pull in the emulator (or anything heavier) until needed.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import IO

from .emulator_commands import add_emulator_commands
from .project_commands import add_project_commands
from .usage import EXIT_FAILURE, EXIT_USAGE, PROG, Parser, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="SQL Server CDC as Dagster assets: tools for the embedded CDC emulator.",
    )
    commands = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=Parser)
    commands.required = True
    add_emulator_commands(commands)
    add_project_commands(commands)
    return parser


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
