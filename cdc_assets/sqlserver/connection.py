"""Where DB-API connections come from: pyodbc for a real SQL Server, or settings naming a factory.

Settings are pydantic models, so a bad value fails with the field's name and the fix
(DESIGN.md section 8). A :class:`ConnectionFactory` turns settings into connections and is
picklable, so Spark executors can open their own. The T-SQL sent is the same on both paths.

pyodbc (Microsoft ODBC Driver 18 for SQL Server, or FreeTDS) is imported lazily: the emulator path
works without ``libodbc``. Every pyodbc connection gets an output converter for
``datetimeoffset`` (ODBC type -155, which pyodbc cannot convert by itself) returning tz-aware
datetimes, as the emulator does.

The password never appears in a ``repr``, a log line or an error: it is a ``SecretStr`` (or the
*name* of an environment variable read at connect time), connection strings are only printed
redacted, and login errors are scrubbed before they are translated.

https://learn.microsoft.com/en-us/sql/connect/odbc/dsn-connection-string-attribute
https://www.freetds.org/userguide/odbcconnattr.html
https://github.com/mkleehammer/pyodbc/wiki/Using-an-Output-Converter-function
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .arrow_types import datetimeoffset_from_odbc
from .dbapi import DbapiConnection
from .errors import (
    LoginFailed,
    SourceUnreachable,
    SqlServerError,
    is_dbapi_error,
    translate_dbapi_error,
)

__all__ = [
    "DEFAULT_DRIVER",
    "FREETDS_DRIVER",
    "ConnectionFactory",
    "ConnectionSettings",
    "DsnSettings",
    "OdbcConnectionFactory",
    "OdbcSettings",
    "RawOdbcConnectionFactory",
    "SourceSettings",
    "TranslatedErrors",
    "connection_factory",
    "datetimeoffset_from_odbc",
]

DEFAULT_DRIVER = "ODBC Driver 18 for SQL Server"
FREETDS_DRIVER = "FreeTDS"
SQL_SS_TIMESTAMPOFFSET = -155  # ODBC type code of datetimeoffset

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NEEDS_BRACES_RE = re.compile(r"[;{}=\s]|^$")


def _odbc_value(value: str) -> str:
    """An ODBC connection string value, braced (``}`` doubled) when it needs to be."""
    if _NEEDS_BRACES_RE.search(value):
        return "{" + value.replace("}", "}}") + "}"
    return value


class OdbcSettings(BaseModel):
    """A SQL Server reached through pyodbc and an ODBC driver."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str = Field(description="Host name or IP address of the SQL Server.", min_length=1)
    port: int | None = Field(
        default=None, ge=1, le=65535, description="TCP port (default 1433); not with instance."
    )
    instance: str | None = Field(
        default=None, description="Named instance (resolved by SQL Browser); not with port."
    )
    database: str = Field(description="The CDC-enabled database.", min_length=1, max_length=128)
    user: str | None = Field(
        default=None, description="SQL login; omit for integrated (Kerberos) authentication."
    )
    password: SecretStr | None = Field(
        default=None,
        description="The login's password (e.g. a resolved dagster.EnvVar). Never logged.",
    )
    password_env: str | None = Field(
        default=None,
        description="Name of the environment variable holding the password, read at connect time.",
    )
    driver: str = Field(
        default=DEFAULT_DRIVER,
        description=f"ODBC driver name: {DEFAULT_DRIVER!r} or {FREETDS_DRIVER!r} "
        "(see pyodbc.drivers()).",
    )
    encrypt: Literal["yes", "no", "strict"] = Field(
        default="yes", description="TLS: yes (Driver 18 default), no, or strict (TDS 8)."
    )
    trust_server_certificate: bool = Field(
        default=False, description="Accept a self-signed server certificate (Driver 18)."
    )
    login_timeout: int = Field(default=15, ge=1, le=600, description="Login time-out, seconds.")
    application_name: str = Field(default="cdc_assets", description="APP= seen by the DBA.")

    @field_validator("server", "database", "user", "instance", "driver", "application_name")
    @classmethod
    def _no_control_or_braces(cls, value: str | None) -> str | None:
        if value is not None and (any(ord(c) < 32 for c in value) or "}" in value):
            raise ValueError("must not contain control characters or '}'")
        return value

    @field_validator("password_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME_RE.match(value):
            raise ValueError(
                "is the NAME of an environment variable (letters, digits, underscore), "
                "not the password itself"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> OdbcSettings:
        if self.port is not None and self.instance is not None:
            raise ValueError("set either port or instance, not both (an instance has its own port)")
        if self.password is not None and self.password_env is not None:
            raise ValueError("set either password or password_env, not both")
        if self.user is not None and self.password is None and self.password_env is None:
            raise ValueError(
                f"user {self.user!r} needs a password: set password_env to the name of the "
                "environment variable that holds it"
            )
        if self.user is None and (self.password is not None or self.password_env is not None):
            raise ValueError("a password was given without user")
        if self.is_freetds and self.encrypt == "strict":
            raise ValueError("encrypt='strict' (TDS 8) needs ODBC Driver 18, not FreeTDS")
        return self

    @property
    def is_freetds(self) -> bool:
        return self.driver.strip().lower() == FREETDS_DRIVER.lower()

    def resolve_password(self) -> SecretStr | None:
        """The password, reading ``password_env`` now; a clear error if it is not set."""
        if self.password is not None:
            return self.password
        if self.password_env is None:
            return None
        value = os.environ.get(self.password_env)
        if value is None:
            raise LoginFailed(
                f"The environment variable {self.password_env} (password of {self.user!r}) is "
                "not set.",
                hint=f"Export {self.password_env} in the environment of this process.",
            )
        return SecretStr(value)

    def connection_string(self, *, redact: bool = True) -> str:
        """The ODBC connection string; with ``redact`` (the default) the password is ``***``."""
        if self.instance:
            server = f"{self.server}\\{self.instance}"
        elif self.port is not None and not self.is_freetds:
            server = f"tcp:{self.server},{self.port}"
        else:
            server = self.server
        parts: list[tuple[str, str]] = [("DRIVER", self.driver), ("SERVER", server)]
        if self.is_freetds:
            if not self.instance:
                parts.append(("PORT", str(self.port or 1433)))
            parts.append(("TDS_Version", "7.4"))
            parts.append(("Encryption", "require" if self.encrypt == "yes" else "off"))
        else:
            parts.append(("Encrypt", self.encrypt))
            parts.append(
                ("TrustServerCertificate", "yes" if self.trust_server_certificate else "no")
            )
        parts.append(("DATABASE", self.database))
        if self.user is not None:
            parts.append(("UID", self.user))
            if redact:
                parts.append(("PWD", "***"))
            else:
                password = self.resolve_password()
                value = password.get_secret_value() if password else ""
                if self.is_freetds and "}" in value:
                    # FreeTDS before 1.4 (Debian 12 ships 1.3.17) does not undo the ODBC rule
                    # of doubling '}' inside braces: the password would arrive altered or cut.
                    raise LoginFailed(
                        f"The password of {self.user!r} contains '}}', which FreeTDS (before "
                        "1.4) cannot take in a connection string; it was not sent.",
                        hint="Use the driver 'ODBC Driver 18 for SQL Server', or give the login "
                        "a password without '}'.",
                    )
                parts.append(("PWD", value))
        elif not self.is_freetds:
            parts.append(("Trusted_Connection", "yes"))
        parts.append(("APP", self.application_name))
        return ";".join(f"{k}={_odbc_value(v)}" for k, v in parts) + ";"


class DsnSettings(BaseModel):
    """A complete ODBC connection string (e.g. from ``CDC_TEST_SQLSERVER_DSN``); secret as a
    whole, since it usually holds the password."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connection_string: SecretStr
    login_timeout: int = Field(default=15, ge=1, le=600)


@runtime_checkable
class ConnectionFactory(Protocol):
    """Opens DB-API connections (picklable, so Spark executors can open their own)."""

    def connect(self, *, autocommit: bool = True) -> DbapiConnection: ...


def _scrub(text: str, secret: str | None) -> str:
    text = re.sub(r"(?i)(PWD\s*=\s*)(\{(?:[^}]|\}\})*\}|[^;]*)", r"\1***", text)
    if secret:
        text = text.replace(secret, "***")
    return text


def _pyodbc_connect(connection_string: str, *, autocommit: bool, timeout: int) -> Any:
    """Open a pyodbc connection; errors are translated with any secret scrubbed from them."""
    try:
        import pyodbc
    except ImportError as exc:  # libodbc.so.2 missing, or pyodbc not installed
        raise SqlServerError(
            f"pyodbc cannot be imported: {exc}",
            hint="Install unixODBC (Debian: apt-get install unixodbc) and an ODBC driver "
            "(msodbcsql18, or tdsodbc for FreeTDS).",
        ) from None
    password_match = re.search(r"(?i)PWD\s*=\s*(\{(?:[^}]|\}\})*\}|[^;]*)", connection_string)
    secret = password_match.group(1) if password_match else None
    if secret and secret.startswith("{"):
        secret = secret[1:-1].replace("}}", "}")
    failure: tuple[str, ...] | None = None
    try:
        conn = pyodbc.connect(connection_string, autocommit=autocommit, timeout=timeout)
    except Exception as exc:
        if not is_dbapi_error(exc):
            raise
        failure = tuple(_scrub(str(a), secret) for a in exc.args)
    if failure is not None:  # raised outside the except block: no chained original error
        error = translate_dbapi_error(Exception(*failure))
        if any("Can't open lib" in a or "Data source name not found" in a for a in failure):
            error = SqlServerError(
                error.message,
                hint=f"That ODBC driver is not installed; installed drivers: {pyodbc.drivers()}.",
            )
        raise error
    conn.add_output_converter(SQL_SS_TIMESTAMPOFFSET, datetimeoffset_from_odbc)
    return conn


@dataclass(frozen=True)
class OdbcConnectionFactory:
    settings: OdbcSettings

    def connect(self, *, autocommit: bool = True) -> DbapiConnection:
        s = self.settings
        connection_string = s.connection_string(redact=False)
        try:
            conn: DbapiConnection = _pyodbc_connect(
                connection_string, autocommit=autocommit, timeout=s.login_timeout
            )
        except SqlServerError as exc:
            failure = exc
        else:
            return conn
        # Raised outside the except block, so no chained error carries the driver's text.
        raise self._explained(failure)

    def _explained(self, exc: SqlServerError) -> SqlServerError:
        """``exc`` with what the driver's text leaves out."""
        s = self.settings
        if isinstance(exc, LoginFailed):
            # The server sends 4060 (no such database) before 18456, but FreeTDS ranks 18456
            # first and pyodbc keeps only the first record: name what was asked for.
            return LoginFailed(
                f"{exc.message} (user {s.user!r}, database {s.database!r} on {self.where})",
                hint=f"{exc.hint} Check that database {s.database!r} exists on {self.where}.",
                native_error=exc.native_error,
            )
        tls_refused = s.is_freetds and s.encrypt == "yes" and not exc.native_error
        if isinstance(exc, SourceUnreachable) and tls_refused:
            # FreeTDS ends the pre-login handshake without a message when the server cannot
            # encrypt; the host was reached, so say what really failed.
            return SourceUnreachable(
                f"TLS could not be negotiated with {self.where}: encrypt is 'yes' and the "
                f"connection ended in the pre-login handshake ({exc.message}).",
                hint="Enable TLS on the server (install a certificate), or set encrypt: no on a "
                "trusted network; check that FreeTDS was built with TLS (tsql -C).",
                native_error=exc.native_error,
            )
        return exc

    @property
    def where(self) -> str:
        s = self.settings
        if s.instance:
            return f"{s.server}\\{s.instance}"
        return f"{s.server}:{s.port or 1433}"

    def __repr__(self) -> str:
        return f"OdbcConnectionFactory({self.settings.connection_string(redact=True)!r})"


@dataclass(frozen=True)
class RawOdbcConnectionFactory:
    settings: DsnSettings

    def connect(self, *, autocommit: bool = True) -> DbapiConnection:
        conn: DbapiConnection = _pyodbc_connect(
            self.settings.connection_string.get_secret_value(),
            autocommit=autocommit,
            timeout=self.settings.login_timeout,
        )
        return conn

    def __repr__(self) -> str:
        return "RawOdbcConnectionFactory(connection_string='**********')"


@runtime_checkable
class SourceSettings(Protocol):
    """Settings of a DB-API driver outside this layer that name their own connection factory
    (the emulator's ``EmulatorSettings``); the factory raises that driver's DB-API errors."""

    def connection_factory(self) -> ConnectionFactory: ...


ConnectionSettings = OdbcSettings | DsnSettings | SourceSettings


@dataclass(frozen=True)
class TranslatedErrors:
    """A factory whose DB-API errors are raised as :class:`SqlServerError`, as pyodbc's are."""

    factory: ConnectionFactory

    def connect(self, *, autocommit: bool = True) -> DbapiConnection:
        try:
            return self.factory.connect(autocommit=autocommit)
        except Exception as exc:
            if is_dbapi_error(exc):
                raise translate_dbapi_error(exc) from None
            raise


def connection_factory(settings: ConnectionSettings) -> ConnectionFactory:
    """The factory for ``settings``: pyodbc's for ODBC and DSN settings, else the one the
    settings name, its errors translated."""
    if isinstance(settings, OdbcSettings):
        return OdbcConnectionFactory(settings)
    if isinstance(settings, DsnSettings):
        return RawOdbcConnectionFactory(settings)
    if isinstance(settings, SourceSettings):
        return TranslatedErrors(settings.connection_factory())
    raise TypeError(f"no connection factory for {type(settings).__name__}")
