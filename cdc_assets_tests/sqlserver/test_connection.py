"""Settings validation, connection strings (Driver 18, FreeTDS), secrets, converters, factories."""

from __future__ import annotations

import datetime as dt
import logging
import pickle
import struct
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.sqlserver.arrow_types import arrow_mapping
from cdc_assets.sqlserver.connection import (
    DsnSettings,
    OdbcConnectionFactory,
    OdbcSettings,
    RawOdbcConnectionFactory,
    TranslatedErrors,
    connection_factory,
    datetimeoffset_from_odbc,
)
from cdc_assets.sqlserver.errors import LoginFailed, SourceUnreachable, SqlServerError
from cdc_assets.sqlserver.lsn_queries import find_max_lsn
from cdc_assets_tests.support.fake_tds import has_freetds

SECRET = "s3cr;et}pa=ss"


def settings(**overrides: object) -> OdbcSettings:
    values: dict[str, object] = {
        "server": "sql.example.com",
        "database": "salesdb",
        "user": "cdc_reader",
        "password": SecretStr(SECRET),
    }
    values.update(overrides)
    return OdbcSettings(**values)  # type: ignore[arg-type]


def test_driver18_connection_string() -> None:
    s = settings(port=1433, trust_server_certificate=True)
    assert s.connection_string() == (
        "DRIVER={ODBC Driver 18 for SQL Server};SERVER=tcp:sql.example.com,1433;Encrypt=yes;"
        "TrustServerCertificate=yes;DATABASE=salesdb;UID=cdc_reader;PWD=***;APP=cdc_assets;"
    )
    assert s.connection_string(redact=False).endswith(
        "UID=cdc_reader;PWD={s3cr;et}}pa=ss};APP=cdc_assets;"
    )


def test_driver18_named_instance_strict_and_integrated() -> None:
    s = OdbcSettings(server="db1", instance="CDC", database="sales db", encrypt="strict")
    assert s.connection_string() == (
        "DRIVER={ODBC Driver 18 for SQL Server};SERVER=db1\\CDC;Encrypt=strict;"
        "TrustServerCertificate=no;DATABASE={sales db};Trusted_Connection=yes;APP=cdc_assets;"
    )


def test_freetds_connection_string() -> None:
    s = settings(driver="FreeTDS", encrypt="no")
    assert s.connection_string() == (
        "DRIVER=FreeTDS;SERVER=sql.example.com;PORT=1433;TDS_Version=7.4;Encryption=off;"
        "DATABASE=salesdb;UID=cdc_reader;PWD=***;APP=cdc_assets;"
    )
    named = settings(driver="FreeTDS", instance="SQLEXPRESS")
    assert "SERVER=sql.example.com\\SQLEXPRESS;TDS_Version=7.4;Encryption=require;" in (
        named.connection_string()
    )
    assert "PORT" not in named.connection_string()


def test_password_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = settings(password=None, password_env="CDC_TEST_PASSWORD")
    monkeypatch.setenv("CDC_TEST_PASSWORD", SECRET)
    assert s.resolve_password() == SecretStr(SECRET)
    assert SECRET not in s.connection_string()
    assert "PWD={s3cr;et}}pa=ss}" in s.connection_string(redact=False)
    monkeypatch.delenv("CDC_TEST_PASSWORD")
    with pytest.raises(LoginFailed, match="CDC_TEST_PASSWORD") as info:
        s.connection_string(redact=False)
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"port": 1433, "instance": "X"}, "port or instance"),
        ({"password": None}, "password_env"),
        ({"user": None}, "without user"),
        ({"password": None, "password_env": "not a name!"}, "password_env"),
        ({"password_env": "PW"}, "either password or password_env"),
        ({"driver": "FreeTDS", "encrypt": "strict"}, "strict"),
        ({"encrypt": "maybe"}, "encrypt"),
        ({"login_timeout": 0}, "login_timeout"),
        ({"server": ""}, "server"),
        ({"database": "x" * 129}, "database"),
        ({"server": "a}b"}, "server"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_settings_name_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        settings(**overrides)
    assert field in str(info.value)
    assert SECRET not in str(info.value)


def test_password_never_in_repr_str_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    s = settings()
    factory = connection_factory(s)
    dsn = DsnSettings(connection_string=SecretStr(f"DRIVER=FreeTDS;PWD={SECRET}"))
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("settings %s %r %r %s", s, s, factory, dsn)
    texts = [repr(s), str(s), repr(factory), str(s.model_dump()), s.model_dump_json()]
    texts += [repr(dsn), repr(connection_factory(dsn)), caplog.text]
    for text in texts:
        assert SECRET not in text
        assert "s3cr" not in text


def test_factories_dispatch_and_pickle(tmp_path: Path) -> None:
    assert isinstance(connection_factory(settings()), OdbcConnectionFactory)
    emulated = connection_factory(EmulatorSettings(path=tmp_path / "x.db"))
    assert isinstance(emulated, TranslatedErrors)
    assert emulated.factory == EmulatorConnectionFactory(EmulatorSettings(path=tmp_path / "x.db"))
    raw = connection_factory(DsnSettings(connection_string=SecretStr("DRIVER=FreeTDS")))
    assert isinstance(raw, RawOdbcConnectionFactory)
    for factory in (connection_factory(settings()), emulated, raw):
        assert pickle.loads(pickle.dumps(factory)) == factory
    with pytest.raises(TypeError):
        connection_factory("nope")  # type: ignore[arg-type]


def test_emulator_factory_connects(tmp_path: Path) -> None:
    missing = tmp_path / "e.db"
    # A path that does not exist is an error that says how to create it, not a new empty file.
    with pytest.raises(SourceUnreachable, match=r"does not exist.*cdc-assets emulator create"):
        connection_factory(EmulatorSettings(path=missing)).connect()
    assert not missing.exists()
    emulator.connect(str(missing)).close()
    conn = EmulatorConnectionFactory(EmulatorSettings(path=missing)).connect()
    try:
        assert conn.autocommit is True
        assert find_max_lsn(conn) is None
    finally:
        conn.close()


def test_datetimeoffset_converter() -> None:
    raw = struct.pack("<6hI2h", 2024, 3, 31, 23, 30, 15, 123456700, -5, -30)
    value = datetimeoffset_from_odbc(raw)
    assert value == dt.datetime(
        2024, 3, 31, 23, 30, 15, 123456, tzinfo=dt.timezone(-dt.timedelta(hours=5, minutes=30))
    )
    assert value is not None and value.utcoffset() == -dt.timedelta(hours=5, minutes=30)
    assert datetimeoffset_from_odbc(None) is None
    # a connection without the converter still maps (the Arrow mapping decodes raw values)
    convert = arrow_mapping("datetimeoffset").converter
    assert convert is not None and convert(raw) == value and convert(value) == value


@pytest.mark.skipif(not has_freetds(), reason="needs pyodbc and the FreeTDS ODBC driver")
def test_unreachable_server_through_freetds() -> None:
    secret = SECRET.replace("}", "")  # FreeTDS before 1.4 cannot take '}' (test_freetds_login)
    s = settings(server="127.0.0.1", port=1, driver="FreeTDS", login_timeout=2)
    s = s.model_copy(update={"password": SecretStr(secret)})
    with pytest.raises(SourceUnreachable) as info:
        connection_factory(s).connect()
    assert secret not in str(info.value) and info.value.__context__ is None
    assert info.value.native_error == 20009


@pytest.mark.skipif(not has_freetds(), reason="needs pyodbc (libodbc)")
def test_missing_driver_says_which_are_installed() -> None:
    s = settings(driver="No Such Driver 99")
    with pytest.raises(SqlServerError) as info:
        connection_factory(s).connect()
    assert "installed drivers" in info.value.hint
    assert SECRET not in str(info.value)
