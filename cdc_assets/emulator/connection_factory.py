"""The emulator as a configured source: its settings and the factory that opens its connections.

:class:`EmulatorSettings` is what a source's ``connection.emulator`` section holds. Settings name
their own factory (:meth:`EmulatorSettings.connection_factory`), so the SQL Server layer opens
emulator connections without knowing the emulator. :class:`EmulatorConnectionFactory` is
picklable (Spark executors open their own connections) and opens an existing database file only:
``connect`` would create an empty one, never wanted as a side effect of reading a source. Its
errors are the emulator's pyodbc-shaped DB-API errors, which the SQL Server layer translates as
it translates pyodbc's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .dbapi import Connection, connect
from .errors import database_file_missing

__all__ = ["EmulatorConnectionFactory", "EmulatorSettings"]


class EmulatorSettings(BaseModel):
    """The embedded emulator: a SQLite file path (shared by all processes that open it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: Path = Field(description="Path of the emulator's database file.")
    timeout: float = Field(default=30.0, gt=0, description="Lock wait time-out, seconds.")

    def connection_factory(self) -> EmulatorConnectionFactory:
        return EmulatorConnectionFactory(self)


@dataclass(frozen=True)
class EmulatorConnectionFactory:
    settings: EmulatorSettings

    def connect(self, *, autocommit: bool = True) -> Connection:
        path = Path(self.settings.path)
        if not path.is_file():
            raise database_file_missing(str(path))
        return connect(str(path), autocommit=autocommit, timeout=self.settings.timeout)
