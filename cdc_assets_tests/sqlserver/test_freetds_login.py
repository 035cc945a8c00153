"""The real ODBC path (pyodbc, unixODBC, FreeTDS or Microsoft ODBC Driver 18) logging in to the
emulator served over TDS (:mod:`cdc_assets.tds_server`), which refuses a wrong password (18456)
and a missing database (4060, then 18456) as SQL Server does.

A refused login is one clear :class:`LoginFailed` with its hint, and the password — which went
over the wire: the same settings with the right password and database log in — appears in no
error text, traceback, chained exception, log record or captured output.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest

from cdc_assets import emulator
from cdc_assets.sqlserver.connection import OdbcSettings, connection_factory
from cdc_assets.sqlserver.errors import LoginFailed, SourceUnreachable, SqlServerError
from cdc_assets.tds_server import TdsServer
from cdc_assets_tests.support.fake_tds import FRAGMENT, PASSWORD_ENV, SECRET, USER, has_freetds
from cdc_assets_tests.support.tds import odbc18_driver

Outcome = Literal["login_failed", "database_missing"]
DRIVERS = ["FreeTDS", "odbc18"]


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "salesdb.db"
    emulator.connect(path).close()
    return path


def tds_server(database: Path, password: str = SECRET, *, tls: bool = False) -> TdsServer:
    """The emulator database over TDS, with ``USER`` whose password is ``password``."""
    return TdsServer(database, logins={USER: password}, tls=tls)


# Needs braces in a connection string (';', '{', '='); no '}' (see the brace test below).


pytestmark = pytest.mark.skipif(
    not has_freetds(), reason="pyodbc or the FreeTDS ODBC driver is not installed"
)


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(PASSWORD_ENV, SECRET)
    return SECRET


def _settings(server: TdsServer, database: str = "salesdb", **overrides: object) -> OdbcSettings:
    values: dict[str, object] = {
        "server": "127.0.0.1",
        "port": server.port,
        "database": database,
        "user": USER,
        "password_env": PASSWORD_ENV,
        "driver": "FreeTDS" if overrides.pop("driver", "FreeTDS") == "FreeTDS" else odbc18_driver(),
        "encrypt": "no",
        "login_timeout": 5,
    }
    values.update(overrides)
    return OdbcSettings(**values)  # type: ignore[arg-type]


def _connect_error(settings: OdbcSettings) -> SqlServerError:
    with pytest.raises(SqlServerError) as info:
        connection_factory(settings).connect()
    return info.value


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


def _assert_no_secret(
    exc: BaseException, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    texts = {"traceback": "".join(traceback.format_exception(exc))}
    for n, link in enumerate(_chain(exc)):
        texts[f"chain[{n}] str"] = str(link)
        texts[f"chain[{n}] repr"] = repr(link)
        texts[f"chain[{n}] args"] = repr(link.args)
        texts[f"chain[{n}] attributes"] = repr(vars(link))
    records = caplog.records
    texts["caplog"] = caplog.text
    texts["log records"] = "\n".join(f"{r.getMessage()} {r.args!r} {r.exc_text}" for r in records)
    out, err = capfd.readouterr()
    texts["stdout"], texts["stderr"] = out, err
    for where, text in texts.items():
        for needle in (SECRET, FRAGMENT):
            assert needle not in text, f"the password leaked into {where}: {text[:2000]}"


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("outcome", ["login_failed", "database_missing"])
def test_refused_login_is_one_clear_error_without_the_password(
    outcome: Outcome,
    driver: str,
    database: Path,
    secret_env: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    name = "salesdb" if outcome == "login_failed" else "no_such_db"
    password = "another password" if outcome == "login_failed" else secret_env
    with tds_server(database, password) as server:
        exc = _connect_error(_settings(server, name, driver=driver))
        attempts = list(server.login_attempts)
        # the password went over the wire intact: with the server's password and database, the
        # same settings log in
        if outcome == "database_missing":
            connection_factory(_settings(server, driver=driver)).connect().close()

    # what the client sent: the login, TDS 7.4, no encryption asked for (encrypt="no")
    assert [(a.user, a.database, a.app_name, a.accepted) for a in attempts][:1] == [
        (USER, name, "cdc_assets", False)
    ]
    assert attempts[0].tds_version == 0x74000004
    assert attempts[0].encryption in (0x00, 0x02)  # OFF (Driver 18) or NOT_SUP (FreeTDS)

    # one clear error: what happened (the server's text, the user named) and what to do
    assert type(exc) is LoginFailed
    # FreeTDS ranks diagnostics by severity, so 18456 (class 14) comes before 4060 (class 11),
    # and pyodbc reads only the first record on non-Windows: both outcomes surface as 18456 with
    # FreeTDS; Driver 18 reports 4060 first for a missing database.
    assert exc.native_error in (18456, 4060)
    if exc.native_error == 18456:
        assert exc.message.startswith(f"Login failed for user '{USER}'. (user '{USER}', ")
        assert "password environment" in exc.hint
    assert f"database '{name}'" in exc.message
    assert exc.hint.startswith(LoginFailed.default_hint)
    assert str(exc) == f"{exc.message} Hint: {exc.hint}"
    assert exc.__cause__ is None and exc.__context__ is None  # no raw pyodbc error rides along
    _assert_no_secret(exc, caplog, capfd)


@pytest.mark.parametrize("driver", DRIVERS)
def test_missing_database_error_names_the_database(
    driver: str, database: Path, secret_env: str
) -> None:
    with tds_server(database, secret_env) as server:
        port = server.port
        exc = _connect_error(_settings(server, "no_such_db", driver=driver))
    assert isinstance(exc, LoginFailed) and exc.native_error in (18456, 4060)
    assert f"(user '{USER}', database 'no_such_db' on 127.0.0.1:{port})" in exc.message
    assert "Check that database 'no_such_db' exists" in exc.hint


def test_password_with_closing_brace_reaches_the_server(
    database: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``}`` is doubled inside braces (the ODBC rule); FreeTDS before 1.4 does not undo that, so
    such a password is refused before anything is sent, with what to do instead; ODBC Driver 18
    takes it."""
    secret = "Hunter2;{pw}=X"
    monkeypatch.setenv(PASSWORD_ENV, secret)
    with tds_server(database, secret) as server:
        exc = _connect_error(_settings(server))
        assert list(server.login_attempts) == []  # nothing altered went over the wire
        connection_factory(_settings(server, driver="odbc18")).connect().close()
        assert [a.accepted for a in server.login_attempts] == [True]
    assert isinstance(exc, LoginFailed) and "cannot take" in exc.message
    assert "ODBC Driver 18" in exc.hint
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc)), caplog.text]
    texts += list(capfd.readouterr())
    assert not any(secret in t or "pw}=X" in t for t in texts)


def test_encrypt_yes_against_a_server_without_tls_never_sends_the_login(
    database: Path,
    secret_env: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    with tds_server(database, secret_env, tls=False) as server:
        port = server.port
        exc = _connect_error(_settings(server, encrypt="yes"))
        attempts = list(server.login_attempts)
    assert [a.encryption for a in attempts] == [0x01]  # ENCRYPT_ON: FreeTDS Encryption=require
    assert attempts[0].user is None  # FreeTDS hung up after PRELOGIN: no password in clear text
    assert type(exc) is SourceUnreachable
    assert exc.message.startswith(f"TLS could not be negotiated with 127.0.0.1:{port}")
    assert "encrypt: no" in exc.hint and "tsql -C" in exc.hint
    _assert_no_secret(exc, caplog, capfd)
