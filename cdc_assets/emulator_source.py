"""The emulator as a configured source: its settings and the factory that opens its connections.

:class:`EmulatorSettings` is what a source's ``connection.emulator`` section holds. Settings name
their own factory (:meth:`EmulatorSettings.connection_factory`), so the SQL Server layer opens
emulator connections without knowing the emulator. :class:`EmulatorConnectionFactory` is
picklable (Spark executors open their own connections) and opens an existing database file only:
``connect`` would create an empty one, never wanted as a side effect of reading a source. Its
errors are the emulator's pyodbc-shaped DB-API errors, which the SQL Server layer translates as
it translates pyodbc's.

Outside the emulator package, which is imported only when a connection opens: loading a code
location (every run's worker does) for a source on a real SQL Server imports none of it (the
emulator and its T-SQL translator, sqlglot, cost ~0.4 s of each run's start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from cdc_assets.emulator.dbapi import Connection

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
        from cdc_assets.emulator.dbapi import connect
        from cdc_assets.emulator.errors import database_file_missing

        path = Path(self.settings.path)
        if not path.is_file():
            raise database_file_missing(str(path))
        return connect(str(path), autocommit=autocommit, timeout=self.settings.timeout)
