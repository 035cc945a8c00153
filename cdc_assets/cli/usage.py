"""What every command of the ``cdc-assets`` command line shares: its name, exit statuses, the
error a user can fix (one line, exit status 2) and the argument types of its options.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

EXIT_FAILURE = 1
EXIT_USAGE = 2
PROG = "cdc-assets"


class UsageError(Exception):
    """A problem the user can fix; printed as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (``--help`` still shows the usage)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value
