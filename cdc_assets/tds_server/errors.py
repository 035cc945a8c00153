"""Emulator errors as SQL Server ERROR tokens: the number, state and class (severity) SQL Server
uses, and the message text without the DB-API's driver prefix.

The drivers derive SQLSTATE and the exception class from the number and class themselves, so a
pyodbc caller sees e.g. ``[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]... (313)``.
https://learn.microsoft.com/en-us/sql/relational-databases/errors-events/database-engine-events-and-errors
"""

from __future__ import annotations

from cdc_assets.emulator.errors import USER_ERROR, error_text, number_state_severity

from .wire import message


def error_tokens(exc: Exception) -> list[bytes]:
    """The ERROR token(s) for an emulator (DB-API) error."""
    number, state, severity = number_state_severity(exc)
    return [message(number, state, severity, error_text(exc))]


def internal_error_tokens(exc: Exception) -> list[bytes]:
    """The server failed on something the emulator accepted: one error, the session goes on."""
    text = f"The TDS server failed on this request: {type(exc).__name__}: {exc}"
    return [message(USER_ERROR, 1, 16, text)]
