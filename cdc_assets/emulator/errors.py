"""PEP 249 exceptions shaped like pyodbc's, and the SQL Server errors the emulator raises.

pyodbc raises ``exc.args == (sqlstate, message)`` where the message reads
``[42000] [Microsoft][ODBC Driver 18 for SQL Server][SQL Server]<text> (<number>)
(SQLExecDirectW)``.
The emulator keeps that shape (with ``[cdc_assets emulator]`` as the driver name) so callers can
match the native error number the same way against both, e.g. ``"(313)" in str(exc)``.
The class follows pyodbc's mapping of the SQLSTATE class: ``42`` -> ProgrammingError,
``23`` -> IntegrityError, ``22`` -> DataError, ``HYT00``/``08`` -> OperationalError,
``0A000`` -> NotSupportedError.
"""

from __future__ import annotations

import re

DRIVER = "[cdc_assets emulator][SQL Server]"


class Warning(Exception):
    """PEP 249 ``Warning``."""


class Error(Exception):
    """Base class of every emulator error (PEP 249 ``Error``).

    ``args == (sqlstate, message)`` as with pyodbc; ``number`` is the SQL Server error number
    (0 when there is none); ``hint`` says what to do, when the emulator knows (pyodbc's errors
    have none).
    """

    hint: str = ""
    severity: int | None = None  # set by RAISERROR / THROW; else SQL Server's for the number
    state: int | None = None

    def __init__(self, sqlstate: str, message: str, number: int = 0) -> None:
        super().__init__(sqlstate, message)
        self.sqlstate = sqlstate
        self.number = number

    def __str__(self) -> str:
        return f"('{self.args[0]}', {self.args[1]!r})"


class InterfaceError(Error):
    """Misuse of the DB-API object itself (closed cursor, closed connection)."""


class DatabaseError(Error):
    """Errors reported by the database."""


class DataError(DatabaseError):
    """Bad data: overflow, truncation, conversion (SQLSTATE class 22)."""


class OperationalError(DatabaseError):
    """Lock time-outs, busy database, I/O problems."""


class IntegrityError(DatabaseError):
    """Constraint violations (SQLSTATE class 23)."""


class InternalError(DatabaseError):
    """The emulator's own state is inconsistent."""


class ProgrammingError(DatabaseError):
    """Invalid objects, columns, syntax, CDC misuse (SQLSTATE class 42 and most server errors)."""


class NotSupportedError(DatabaseError):
    """A T-SQL construct the emulator does not implement; the message names it.

    ``construct``: what is not supported, in the user's terms; ``where``: the statement it is in
    (as the user wrote it), when known.
    """

    construct: str = ""
    where: str | None = None


def _message(sqlstate: str, text: str, number: int) -> str:
    suffix = f" ({number})" if number else ""
    return f"[{sqlstate}] {DRIVER}{text}{suffix} (SQLExecDirectW)"


# number -> (state, class) as SQL Server raises them; anything else is state 1, class 16
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
USER_ERROR = 50000  # the number of errors without one of their own (as RAISERROR without id)
_TEXT_RE = re.compile(r"^\[[^\]]*\] (?:\[[^\]]*\])*(?P<text>.*?)(?: \(\d+\))?(?: \(\w+\))?$", re.S)


def error_text(exc: BaseException) -> str:
    """The message of a DB-API error as SQL Server words it (no driver prefix, no number)."""
    raw = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    match = _TEXT_RE.match(raw)
    return match.group("text") if match else raw


def number_state_severity(exc: BaseException) -> tuple[int, int, int]:
    """The error's number (50000 when it has none), state and class, as SQL Server sends them."""
    number = int(getattr(exc, "number", 0) or 0) or USER_ERROR
    state, severity = _KNOWN.get(number, (1, 16))
    given_state, given_severity = getattr(exc, "state", None), getattr(exc, "severity", None)
    return (
        number,
        state if given_state is None else given_state,
        severity if given_severity is None else given_severity,
    )


def user_error(number: int, text: str, severity: int, state: int) -> Error:
    """An error a script raised itself (``RAISERROR``, ``THROW``), with its class and state."""
    error = server_error(number, text)
    error.severity = severity
    error.state = state
    return error


def database_file_missing(path: str) -> OperationalError:
    """No emulator database at ``path``, from a connection factory that never creates one; the
    text and SQLSTATE of a client that cannot reach its server."""
    error = OperationalError(
        "08001", f"[08001] [cdc_assets emulator]The emulated source {path} does not exist."
    )
    error.hint = (
        f"Create it with 'make demo' (the demo's .demo/source.db) or "
        f"'cdc-assets emulator create {path}'."
    )
    return error


def server_error(
    number: int, text: str, *, sqlstate: str = "42000", cls: type[Error] = ProgrammingError
) -> Error:
    """Build the exception pyodbc would raise for SQL Server error ``number`` with ``text``."""
    return cls(sqlstate, _message(sqlstate, text, number), number)


def not_supported(construct: str, where: str | None = None) -> NotSupportedError:
    """The emulator cannot run ``construct`` (found in the statement ``where``); never guess an
    answer instead."""
    text = f"The cdc_assets emulator does not support {construct}"
    text += f" in '{where}'." if where else "."
    error = NotSupportedError("0A000", _message("0A000", text, 0), 0)
    error.construct = construct
    error.where = where
    return error


def syntax_error(near: str, where: str) -> Error:
    """102: the statement ``where`` does not parse; ``near`` is the token where it stopped."""
    if not near:
        return server_error(102, f"Incorrect syntax near the end of '{where}'.")
    return server_error(102, f"Incorrect syntax near '{near}' in '{where}'.")


def unknown_procedure(name: str) -> Error:
    """2812: ``EXEC`` of a procedure the database does not have."""
    return server_error(2812, f"Could not find stored procedure '{name}'.", sqlstate="42000")


def interface_error(text: str) -> InterfaceError:
    return InterfaceError("HY000", _message("HY000", text, 0), 0)


# -- the SQL Server errors used by the emulator ---------------------------------------------------


def invalid_object(name: str) -> Error:
    """208: the object does not exist (e.g. ``cdc.change_tables`` before ``sp_cdc_enable_db``)."""
    return server_error(208, f"Invalid object name '{name}'.", sqlstate="42S02")


def invalid_column(name: str) -> Error:
    """207: unknown column."""
    return server_error(207, f"Invalid column name '{name}'.", sqlstate="42S22")


def ambiguous_column(name: str) -> Error:
    """209: a column name that matches more than one table in scope."""
    return server_error(209, f"Ambiguous column name '{name}'.", sqlstate="42000")


def cdc_function_range(function: str) -> Error:
    """313: a CDC query function called with a range outside the validity interval.

    SQL Server reports every invalid argument of ``cdc.fn_cdc_get_all_changes_<ci>`` and
    ``cdc.fn_cdc_get_net_changes_<ci>`` (range below the minimum LSN, above the maximum LSN,
    from > to, bad row filter) with this misleading text, the function name cut after the prefix.
    """
    return server_error(
        313,
        "An insufficient number of arguments were supplied for the procedure or function "
        f"{function} ... .",
    )


def primary_key_violation(constraint: str, table: str, key: str | None = None) -> Error:
    """2627: duplicate key."""
    text = (
        f"Violation of PRIMARY KEY constraint '{constraint}'. "
        f"Cannot insert duplicate key in object '{table}'."
    )
    if key is not None:
        text += f" The duplicate key value is ({key})."
    return server_error(2627, text, sqlstate="23000", cls=IntegrityError)


def null_violation(column: str, table: str, action: str) -> Error:
    """515: NULL into a NOT NULL column."""
    return server_error(
        515,
        f"Cannot insert the value NULL into column '{column}', table '{table}'; column does not "
        f"allow nulls. {action} fails.",
        sqlstate="23000",
        cls=IntegrityError,
    )


def snapshot_not_allowed(database: str) -> Error:
    """3952: SNAPSHOT isolation used while ``ALLOW_SNAPSHOT_ISOLATION`` is OFF."""
    return server_error(
        3952,
        f"Snapshot isolation transaction failed accessing database '{database}' because snapshot "
        "isolation is not allowed in this database. Use ALTER DATABASE to allow snapshot "
        "isolation.",
        sqlstate="HY000",
        cls=ProgrammingError,
    )


def snapshot_update_conflict(table: str) -> Error:
    """3960: a SNAPSHOT transaction tried to write after another transaction committed."""
    return server_error(
        3960,
        "Snapshot isolation transaction aborted due to update conflict. You cannot use snapshot "
        f"isolation to access table '{table}' directly or indirectly in database to update, "
        "delete, or insert the row that has been modified or deleted by another transaction. "
        "Retry the transaction or change the isolation level for the update/delete statement.",
        sqlstate="HY000",
        cls=OperationalError,
    )


def lock_timeout() -> Error:
    """1222: the lock could not be taken within the busy time-out."""
    return server_error(
        1222, "Lock request time out period exceeded.", sqlstate="HYT00", cls=OperationalError
    )


def arithmetic_overflow(type_name: str) -> Error:
    """8115: a value does not fit its target type."""
    return server_error(
        8115,
        f"Arithmetic overflow error converting expression to data type {type_name}.",
        sqlstate="22003",
        cls=DataError,
    )


def truncation() -> Error:
    """8152: a string or binary value longer than its column."""
    return server_error(
        8152, "String or binary data would be truncated.", sqlstate="22001", cls=DataError
    )


def conversion_failed(value: object, type_name: str) -> Error:
    """245/241/8169-style conversion failure."""
    return server_error(
        245,
        f"Conversion failed when converting the value '{value}' to data type {type_name}.",
        sqlstate="22018",
        cls=DataError,
    )


def no_transaction(statement: str) -> Error:
    """3902/3903: COMMIT or ROLLBACK without BEGIN TRANSACTION."""
    if statement == "COMMIT":
        return server_error(
            3902,
            "The COMMIT TRANSACTION request has no corresponding BEGIN TRANSACTION.",
            sqlstate="25000",
        )
    return server_error(
        3903,
        "The ROLLBACK TRANSACTION request has no corresponding BEGIN TRANSACTION.",
        sqlstate="25000",
    )


def cdc_error(number: int, text: str) -> Error:
    """CDC administration errors (22xxx), raised by the ``sys.sp_cdc_*`` procedures."""
    return server_error(number, text, sqlstate="42000")
