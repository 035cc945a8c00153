"""The commands on a project: ``cdc-assets check`` (load the configuration and discover its
sources, as the code location does), ``cdc-assets convert`` (a cdc_assets.yaml's sources as dg
component instances) and ``cdc-assets demo --headless`` (the demo's continuous sync, verified).
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path
from typing import IO

from cdc_assets.process_group import die_with_parent, raise_keyboard_interrupt, stop_on_signals

from .usage import EXIT_FAILURE, UsageError, non_negative_int, positive_float


def add_project_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``check``, ``convert`` and ``demo`` commands."""
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
    demo.add_argument("--seconds", type=positive_float, default=30.0, help="workload time (30)")
    demo.add_argument(
        "--workdir", type=Path, default=Path(".demo/headless"), help="scratch dir (.demo/headless)"
    )
    demo.add_argument("--rows", type=non_negative_int, default=300, help="rows per table (300)")
    demo.add_argument("--tps", type=positive_float, default=20.0, help="transactions/s (20)")
    demo.add_argument("--seed", type=non_negative_int, default=0, help="random seed (0)")
    demo.set_defaults(handler=_cmd_demo)


def _cmd_check(args: argparse.Namespace, out: IO[str]) -> int:
    """The code location's load, without Dagster's processes: one line either way."""
    from cdc_assets.config import config_path
    from cdc_assets.dagster.code_location import CodeLocationError, check_definitions

    try:
        _defs, sources, components = check_definitions(args.config)
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
