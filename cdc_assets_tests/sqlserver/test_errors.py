"""DB-API errors (pyodbc-style messages) -> the layer's error hierarchy."""

from __future__ import annotations

import pytest

from cdc_assets.sqlserver.errors import (
    CaptureNotReady,
    CdcNotEnabled,
    KeylessTableNeedsSnapshotIsolation,
    LockTimeout,
    LoginFailed,
    LsnNotAvailable,
    PermissionDenied,
    SnapshotIsolationNotAllowed,
    SourceUnreachable,
    SqlServerError,
    is_dbapi_error,
    native_error_number,
    translate_dbapi_error,
)

DRIVER = "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"


class Error(Exception):
    """Stands in for pyodbc.Error: args == (sqlstate, message)."""


Error.__module__ = "pyodbc"


def odbc_error(sqlstate: str, text: str, number: int, call: str = "SQLExecDirectW") -> Error:
    return Error(sqlstate, f"[{sqlstate}] {DRIVER}{text} ({number}) ({call})")


def test_313_is_lsn_not_available() -> None:
    exc = odbc_error(
        "42000",
        "An insufficient number of arguments were supplied for the procedure or function "
        "cdc.fn_cdc_get_all_changes_ ... .",
        313,
    )
    assert native_error_number(exc) == 313
    error = translate_dbapi_error(exc, capture_instance="dbo_orders", requested="(a, b]")
    assert isinstance(error, LsnNotAvailable) and not error.retryable
    assert error.capture_instance == "dbo_orders" and error.native_error == 313
    assert "re-snapshot" in error.hint


@pytest.mark.parametrize(
    ("sqlstate", "number", "text", "cls"),
    [
        (
            "HY000",
            3952,
            "Snapshot isolation transaction failed accessing database 'x'",
            SnapshotIsolationNotAllowed,
        ),
        ("HYT00", 1222, "Lock request time out period exceeded.", LockTimeout),
        ("28000", 18456, "Login failed for user 'cdc'.", LoginFailed),
        ("42000", 4060, 'Cannot open database "x" requested by the login.', LoginFailed),
        (
            "42000",
            229,
            "The SELECT permission was denied on the object 'cdc_jobs'",
            PermissionDenied,
        ),
        (
            "42000",
            300,
            "VIEW SERVER STATE permission was denied on object 'server'",
            PermissionDenied,
        ),
        ("42S02", 208, "Invalid object name 'cdc.change_tables'.", CdcNotEnabled),
        ("08001", 11001, "TCP Provider: No such host is known.", SourceUnreachable),
    ],
)
def test_native_numbers(sqlstate: str, number: int, text: str, cls: type[SqlServerError]) -> None:
    error = translate_dbapi_error(odbc_error(sqlstate, text, number))
    assert type(error) is cls
    assert error.native_error == number and error.hint


def test_login_timeout_and_freetds_unreachable() -> None:
    timeout = Error(
        "HYT00",
        "[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]Login timeout expired (0) "
        "(SQLDriverConnect)",
    )
    assert isinstance(translate_dbapi_error(timeout), SourceUnreachable)
    freetds = Error(
        "08S01",
        "[08S01] [FreeTDS][SQL Server]Unable to connect: Adaptive Server is unavailable or does "
        "not exist (20009) (SQLDriverConnect)",
    )
    error = translate_dbapi_error(freetds)
    assert isinstance(error, SourceUnreachable)
    assert error.message.startswith("Unable to connect")


def test_other_invalid_object_is_not_cdc_not_enabled() -> None:
    error = translate_dbapi_error(odbc_error("42S02", "Invalid object name 'dbo.nope'.", 208))
    assert type(error) is SqlServerError and error.native_error == 208
    assert "Invalid object name 'dbo.nope'." in str(error)


def test_unknown_error_keeps_text_and_number() -> None:
    error = translate_dbapi_error(odbc_error("40001", "Transaction was deadlocked", 1205))
    assert type(error) is SqlServerError and error.native_error == 1205
    assert "1205" in str(error) and "deadlocked" in str(error)
    assert "[Microsoft]" not in error.message and "learn.microsoft.com" in error.hint


def test_multi_record_message_uses_the_first_number() -> None:
    exc = Error(
        "28000",
        f"[28000] {DRIVER}Login failed for user 'x'. (18456) (SQLDriverConnect); "
        f"[28000] {DRIVER}Login failed for user 'x'. (18456) (SQLDriverConnect)",
    )
    assert isinstance(translate_dbapi_error(exc), LoginFailed)


def test_emulator_errors_translate_the_same() -> None:
    from cdc_assets.emulator import errors as emu

    exc = emu.cdc_function_range("cdc.fn_cdc_get_all_changes_")
    assert is_dbapi_error(exc)
    assert isinstance(translate_dbapi_error(exc), LsnNotAvailable)
    assert isinstance(
        translate_dbapi_error(emu.snapshot_not_allowed("db")), SnapshotIsolationNotAllowed
    )
    assert isinstance(translate_dbapi_error(emu.lock_timeout()), LockTimeout)
    assert isinstance(translate_dbapi_error(emu.invalid_object("cdc.change_tables")), CdcNotEnabled)


def test_is_dbapi_error() -> None:
    assert is_dbapi_error(odbc_error("42000", "x", 1))
    assert not is_dbapi_error(ValueError("x"))
    assert not is_dbapi_error(RuntimeError("Error"))


def test_only_capture_not_ready_is_retryable() -> None:
    assert CaptureNotReady("x").retryable
    assert not SqlServerError("x").retryable
    for error in [
        CdcNotEnabled("db"),
        LsnNotAvailable("ci", "(a, b]"),
        SnapshotIsolationNotAllowed("x"),
        KeylessTableNeedsSnapshotIsolation("[dbo].[t]"),
        LoginFailed("x"),
        PermissionDenied("x"),
        SourceUnreachable("x"),
        LockTimeout("x"),
    ]:
        assert not error.retryable, type(error)
        assert error.hint, type(error)
        assert error.hint in str(error)


def test_messages_name_the_problem() -> None:
    assert "salesdb" in str(CdcNotEnabled("salesdb"))
    assert "sp_cdc_enable_db" in str(CdcNotEnabled("salesdb"))
    assert "[dbo].[t]" in str(KeylessTableNeedsSnapshotIsolation("[dbo].[t]"))
