"""Emulator errors as SQL Server ERROR tokens: the number, state and class (severity) SQL Server
uses, and the message text without the DB-API's driver prefix.

The drivers derive SQLSTATE and the exception class from the number and class themselves, so a
pyodbc caller sees e.g. ``[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]... (313)``.
https://learn.microsoft.com/en-us/sql/relational-databases/errors-events/database-engine-events-and-errors
"""

from __future__ import annotations

import re

from .wire import message

# number -> (state, class); anything else is state 1, class 16
_KNOWN = {
    1205: (51, 13),  # deadlock victim
    1222: (56, 16),  # lock request time-out
    2601: (1, 14),  # duplicate key (unique index)
    2627: (1, 14),  # duplicate key (primary key / unique constraint)
    313: (3, 16),  # CDC function argument outside the validity interval
    3960: (2, 16),  # snapshot update conflict
    4060: (1, 11),  # cannot open database
    18456: (1, 14),  # login failed
}
_TEXT_RE = re.compile(r"^\[[^\]]*\] (?:\[[^\]]*\])*(?P<text>.*?)(?: \(\d+\))?(?: \(\w+\))?$", re.S)
USER_ERROR = 50000  # the number of errors without one of their own (as RAISERROR without id)


def _text(raw: str) -> str:
    match = _TEXT_RE.match(raw)
    return match.group("text") if match else raw


def error_tokens(exc: Exception) -> list[bytes]:
    """The ERROR token(s) for an emulator (DB-API) error."""
    number = int(getattr(exc, "number", 0) or 0)
    raw = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if number == 0:
        number = USER_ERROR
    state, severity = _KNOWN.get(number, (1, 16))
    return [message(number, state, severity, _text(raw))]


def internal_error_tokens(exc: Exception) -> list[bytes]:
    """The server failed on something the emulator accepted: one error, the session goes on."""
    text = f"The TDS server failed on this request: {type(exc).__name__}: {exc}"
    return [message(USER_ERROR, 1, 16, text)]
