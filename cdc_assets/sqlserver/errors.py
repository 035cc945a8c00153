"""What can go wrong talking to a CDC source, as a small hierarchy the upper layers can act on.

Every error is a :class:`SqlServerError` with a message that says what happened and a ``hint``
that says what to do. Only :class:`CaptureNotReady` is ``retryable``: CDC was just enabled and the
capture job has not run yet, so ``sys.fn_cdc_get_max_lsn()`` is NULL; waiting fixes it. Everything
else needs a person (or a re-snapshot) and must fail loudly — in particular
:class:`LsnNotAvailable`, which other connectors swallow and so lose changes silently.

:func:`translate_dbapi_error` turns a DB-API exception from pyodbc or the emulator into one of
these. Both put the SQL Server native error number at the end of the message,
``... <text> (<number>) (SQLExecDirectW)``, which is what is matched here. Messages never carry a
password: connection strings are not part of DB-API error texts, and :mod:`.connection` scrubs
login errors before they are translated.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from cdc_assets.lsn import Lsn

__all__ = [
    "CaptureInstanceNotFound",
    "CaptureNotReady",
    "CdcNotEnabled",
    "KeylessTableNeedsSnapshotIsolation",
    "LockTimeout",
    "LoginFailed",
    "LsnNotAvailable",
    "PermissionDenied",
    "SnapshotIsolationNotAllowed",
    "SourceUnreachable",
    "SqlServerError",
    "is_dbapi_error",
    "native_error_number",
    "translate_dbapi_error",
]


class SqlServerError(Exception):
    """Base class: a CDC source operation failed. ``hint`` tells the user what to do."""

    retryable: ClassVar[bool] = False
    default_hint: ClassVar[str] = ""

    def __init__(
        self, message: str, *, hint: str | None = None, native_error: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint
        self.native_error = native_error

    def __str__(self) -> str:
        return f"{self.message} Hint: {self.hint}" if self.hint else self.message


class CaptureNotReady(SqlServerError):
    """CDC is enabled but the capture job has not yet produced a max LSN or an instance start."""

    retryable = True
    default_hint = (
        "The capture job (SQL Server Agent job cdc.<database>_capture) has not run yet since CDC "
        "was enabled. Make sure SQL Server Agent is running; this clears by itself once it has."
    )


class CdcNotEnabled(SqlServerError):
    """The database is not enabled for CDC (no ``cdc`` schema, ``is_cdc_enabled = 0``)."""

    def __init__(self, database: str | None, *, native_error: int | None = None) -> None:
        self.database = database
        name = f"Database {database!r}" if database else "The database"
        super().__init__(
            f"{name} is not enabled for change data capture.",
            hint=(
                "Run EXEC sys.sp_cdc_enable_db in that database (sysadmin), then "
                "sys.sp_cdc_enable_table for each table to capture."
            ),
            native_error=native_error,
        )


class CaptureInstanceNotFound(SqlServerError):
    """A capture instance (or a source table's CDC) does not exist."""

    def __init__(self, capture_instance: str, *, detail: str = "") -> None:
        self.capture_instance = capture_instance
        super().__init__(
            f"Capture instance {capture_instance!r} does not exist"
            + (f" ({detail})." if detail else "."),
            hint=(
                "Check EXEC sys.sp_cdc_help_change_data_capture; the table may have been disabled "
                "for CDC or re-enabled under a new capture instance. Re-discover the catalog and "
                "re-snapshot the table."
            ),
        )


class LsnNotAvailable(SqlServerError):
    """A requested LSN range lies outside the capture instance's validity interval.

    Below the minimum: cleanup removed changes (data would be lost; re-snapshot). Above the
    maximum: capture has not processed that far yet. Raised by our own validity checks and mapped
    from SQL Server error 313.
    """

    def __init__(
        self,
        capture_instance: str | None,
        requested: object,
        minimum: Lsn | None = None,
        maximum: Lsn | None = None,
        *,
        native_error: int | None = None,
        reason: str = "",
    ) -> None:
        self.capture_instance = capture_instance
        self.requested = requested
        self.minimum = minimum
        self.maximum = maximum
        where = f"capture instance {capture_instance!r}" if capture_instance else "a CDC function"
        interval = (
            f"; the validity interval is [{minimum}, {maximum}]"
            if minimum is not None or maximum is not None
            else ""
        )
        super().__init__(
            f"LSN range {requested} is not available from {where}{interval}"
            + (f": {reason}." if reason else "."),
            hint=(
                "Changes below the minimum LSN were removed by the CDC cleanup job (retention), "
                "so this range can no longer be read completely: re-snapshot the table. A range "
                "above the maximum LSN is not captured yet: wait for the capture job."
            ),
            native_error=native_error,
        )


class SnapshotIsolationNotAllowed(SqlServerError):
    """A SNAPSHOT transaction was refused: ``ALLOW_SNAPSHOT_ISOLATION`` is OFF (error 3952)."""

    default_hint = (
        "Run ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON for an exact snapshot, or use "
        "the fuzzy snapshot mode (it needs a primary key or unique index on every table)."
    )


class KeylessTableNeedsSnapshotIsolation(SqlServerError):
    """A table without key cannot be snapshotted fuzzily: replay needs a key to be idempotent."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"Table {table} has no primary key or unique index, and the database does not allow "
            "snapshot isolation, so no consistent snapshot can be taken.",
            hint=(
                "Either run ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON (exact "
                "snapshot), or add a primary key and re-enable CDC on the table with "
                "@index_name naming it."
            ),
        )


class LockTimeout(SqlServerError):
    """A lock (the exact snapshot's table lock) was not granted in time (error 1222)."""

    default_hint = (
        "A long transaction holds locks on the table. Retry later, or use the fuzzy snapshot mode "
        "which takes no table lock."
    )


class SourceUnreachable(SqlServerError):
    """The server could not be reached (network, name, port, instance, TLS)."""

    default_hint = (
        "Check server, port/instance and that the host is reachable from here; with ODBC Driver "
        "18 also check encrypt/trust_server_certificate."
    )


class LoginFailed(SqlServerError):
    """The login was refused (error 18456) or the database could not be opened (4060)."""

    default_hint = (
        "Check the user name and the password environment variable, and that the login has "
        "access to the database."
    )


class PermissionDenied(SqlServerError):
    """The login lacks a permission the operation needs (229, 230, 262, 297, 300, 22904...)."""

    default_hint = (
        "Reading CDC needs SELECT on the source tables and the cdc schema (or membership in the "
        "capture instance's gating role); exact snapshots need VIEW SERVER STATE "
        "(sys.dm_tran_database_transactions); health needs SELECT on msdb.dbo.cdc_jobs and "
        "VIEW DATABASE STATE."
    )


# -- translation from DB-API errors ------------------------------------------------------------

_NATIVE_RE = re.compile(r"\((-?\d+)\)\s*\(SQL\w+\)")
_PREFIX_RE = re.compile(r"^(?:\s*\[[^\]]*\])+\s*")
_OBJECT_RE = re.compile(r"Invalid object name '([^']*)'")

_PERMISSION_ERRORS = frozenset({229, 230, 262, 297, 300, 916, 15247, 22902, 22904})
_UNREACHABLE_ERRORS = frozenset({2, 53, 258, 1225, 10054, 10060, 10061, 11001, 20009, 20017})
_UNREACHABLE_STATES = ("08001", "08S01", "HYT00", "HYT01")
# the connection went away after it was made: reset by peer (TCP), FreeTDS read/write failed
_CONNECTION_LOST_ERRORS = frozenset({10053, 10054, 20004, 20006})


def native_error_number(exc: BaseException) -> int | None:
    """The SQL Server native error number from a pyodbc-style message, or None."""
    match = _NATIVE_RE.search(_message(exc))
    return int(match.group(1)) if match else None


def is_dbapi_error(exc: BaseException) -> bool:
    """True for a PEP 249 error of any driver (pyodbc, the emulator): a class named ``Error``
    from a driver module in its MRO."""
    return any(
        cls.__name__ == "Error" and cls.__module__ != "builtins" for cls in type(exc).__mro__
    )


def _message(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    if len(args) >= 2 and isinstance(args[1], str):
        return args[1]
    return str(exc)


def _sqlstate(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], str) else ""


def _text(message: str) -> str:
    """The server's text without the ``[state] [driver][SQL Server]`` prefix and the suffixes."""
    return _NATIVE_RE.split(_PREFIX_RE.sub("", message), maxsplit=1)[0].strip()


def translate_dbapi_error(
    exc: BaseException,
    *,
    capture_instance: str | None = None,
    requested: object = None,
    database: str | None = None,
) -> SqlServerError:
    """Map a DB-API error to the hierarchy above (the caller raises it ``from exc``).

    The context arguments fill in what the server message does not say (error 313 names no
    capture instance). Unknown errors become a plain :class:`SqlServerError` keeping the text and
    the native number. A driver's error that carries a ``hint`` (the emulator's do) keeps it.
    """
    if isinstance(exc, SqlServerError):
        return exc
    error = _translated(
        exc, capture_instance=capture_instance, requested=requested, database=database
    )
    hint = getattr(exc, "hint", None)
    if isinstance(hint, str) and hint:
        error.hint = hint
    return error


def _translated(
    exc: BaseException,
    *,
    capture_instance: str | None,
    requested: object,
    database: str | None,
) -> SqlServerError:
    message = _message(exc)
    number = native_error_number(exc)
    state = _sqlstate(exc)
    text = _text(message)
    if number == 313:
        return LsnNotAvailable(
            capture_instance,
            requested if requested is not None else "(unknown)",
            native_error=313,
            reason="SQL Server refused the range (error 313)",
        )
    if number == 3952:
        return SnapshotIsolationNotAllowed(text, native_error=3952)
    if number == 1222:
        return LockTimeout(text, native_error=1222)
    if number in (18456, 18452, 18486, 18487, 18488, 4060):
        return LoginFailed(text, native_error=number)
    if number in _PERMISSION_ERRORS:
        return PermissionDenied(text, native_error=number)
    if number == 208:
        match = _OBJECT_RE.search(text)
        if match and match.group(1).lower().lstrip("[").startswith("cdc"):
            return CdcNotEnabled(database, native_error=208)
    if number in _CONNECTION_LOST_ERRORS or "Communication link failure" in text:
        return SourceUnreachable(
            text,
            hint="The connection to the server was lost in the middle of the work; nothing "
            "half-read is kept. The sync sensor retries the range after a pause; if it keeps "
            "happening, check the network and the server's error log.",
            native_error=number,
        )
    if number in _UNREACHABLE_ERRORS or (state in _UNREACHABLE_STATES and number in (None, 0, -1)):
        return SourceUnreachable(text, native_error=number)
    if state.startswith("08"):
        return SourceUnreachable(text, native_error=number)
    return SqlServerError(
        f"SQL Server error {number}: {text}" if number else text or message,
        hint=(
            "See the error number in https://learn.microsoft.com/en-us/sql/relational-databases/"
            "errors-events/database-engine-events-and-errors"
            if number
            else ""
        ),
        native_error=number,
    )
