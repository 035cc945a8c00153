"""The real ODBC path (pyodbc, unixODBC, FreeTDS) up to the login, against a fake TDS server
(:mod:`cdc_assets_tests.support.fake_tds`) that refuses it.

A refused login is one clear :class:`LoginFailed` with its hint, and the password — which the
fake server decodes from LOGIN7, so it provably went over the wire — appears in no error text,
traceback, chained exception, log record or captured output.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator

import pytest

from cdc_assets.sqlserver.connection import OdbcSettings, connection_factory
from cdc_assets.sqlserver.errors import LoginFailed, SourceUnreachable, SqlServerError
from cdc_assets_tests.support.fake_tds import (
    FRAGMENT,
    PASSWORD_ENV,
    SECRET,
    USER,
    FakeTdsServer,
    Outcome,
    has_freetds,
)

# Needs braces in a connection string (';', '{', '='); no '}' (see the brace test below).


pytestmark = pytest.mark.skipif(
    not has_freetds(), reason="pyodbc or the FreeTDS ODBC driver is not installed"
)


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(PASSWORD_ENV, SECRET)
    return SECRET


def _settings(
    server: FakeTdsServer, database: str = "salesdb", **overrides: object
) -> OdbcSettings:
    values: dict[str, object] = {
        "server": "127.0.0.1",
        "port": server.port,
        "database": database,
        "user": USER,
        "password_env": PASSWORD_ENV,
        "driver": "FreeTDS",
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


@pytest.mark.parametrize("outcome", ["login_failed", "database_missing"])
def test_refused_login_is_one_clear_error_without_the_password(
    outcome: Outcome,
    secret_env: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    database = "salesdb" if outcome == "login_failed" else "no_such_db"
    with FakeTdsServer(outcome) as server:
        exc = _connect_error(_settings(server, database))
    assert server.failures == []

    # the password really went over the wire (decoded from LOGIN7), with the rest of the login
    assert [(x.user_name, x.password, x.database) for x in server.logins] == [
        (USER, secret_env, database)
    ]
    assert server.logins[0].app_name == "cdc_assets"
    assert server.logins[0].tds_version == 0x74000004  # TDS 7.4, as the settings ask
    assert server.client_encryption == [0x02]  # ENCRYPT_NOT_SUP: encrypt="no"

    # one clear error: what happened (the server's text, the user named) and what to do
    assert type(exc) is LoginFailed
    # FreeTDS ranks diagnostics by severity, so 18456 (class 14) comes before 4060 (class 11),
    # and pyodbc reads only the first record on non-Windows: both outcomes surface as 18456.
    assert exc.native_error == 18456
    assert exc.message.startswith(f"Login failed for user '{USER}'. (user '{USER}', database ")
    assert exc.hint.startswith(LoginFailed.default_hint) and "password environment" in exc.hint
    assert str(exc) == f"{exc.message} Hint: {exc.hint}"
    assert exc.__cause__ is None and exc.__context__ is None  # no raw pyodbc error rides along
    _assert_no_secret(exc, caplog, capfd)


def test_missing_database_error_names_the_database(secret_env: str) -> None:
    with FakeTdsServer("database_missing") as server:
        port = server.port
        exc = _connect_error(_settings(server, "no_such_db"))
    assert isinstance(exc, LoginFailed) and exc.native_error == 18456
    assert f"(user '{USER}', database 'no_such_db' on 127.0.0.1:{port})" in exc.message
    assert "Check that database 'no_such_db' exists" in exc.hint


def test_password_with_closing_brace_reaches_the_server(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``}`` is doubled inside braces (the ODBC rule); FreeTDS before 1.4 does not undo that, so
    such a password is refused before anything is sent, with what to do instead."""
    secret = "Hunter2;{pw}=X"
    monkeypatch.setenv(PASSWORD_ENV, secret)
    with FakeTdsServer() as server:
        exc = _connect_error(_settings(server))
    assert isinstance(exc, LoginFailed) and "cannot take" in exc.message
    assert "ODBC Driver 18" in exc.hint
    assert server.logins == []  # nothing altered went over the wire
    texts = [str(exc), repr(exc), "".join(traceback.format_exception(exc)), caplog.text]
    texts += list(capfd.readouterr())
    assert not any(secret in t or "pw}=X" in t for t in texts)


def test_encrypt_yes_against_a_server_without_tls_never_sends_the_login(
    secret_env: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeTdsServer() as server:
        port = server.port
        exc = _connect_error(_settings(server, encrypt="yes"))
    assert server.failures == []
    assert server.client_encryption == [0x01]  # ENCRYPT_ON: FreeTDS Encryption=require
    assert server.logins == []  # FreeTDS hung up after PRELOGIN: no password in clear text
    assert type(exc) is SourceUnreachable
    assert exc.message.startswith(f"TLS could not be negotiated with 127.0.0.1:{port}")
    assert "encrypt: no" in exc.hint and "tsql -C" in exc.hint
    _assert_no_secret(exc, caplog, capfd)
