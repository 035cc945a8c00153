"""Fixtures for the SQL Server layer: emulated CDC databases in ``tmp_path``, built with T-SQL.

Capture is asynchronous in SQL Server and in the emulator; tests run a capture scan
(:meth:`CdcDatabase.scan`, ``sys.sp_cdc_scan``) to capture deterministically.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cdc_assets import emulator
from cdc_assets.emulator_source import EmulatorConnectionFactory, EmulatorSettings
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.quoting import quote_table


@dataclass
class CdcDatabase:
    """An emulated CDC database: a path, an autocommit connection and a connection factory."""

    path: Path
    conn: Any
    factory: EmulatorConnectionFactory
    _opened: list[Any] = field(default_factory=list)

    def execute(self, sql: str, *params: Any) -> Any:
        return self.conn.execute(sql, *params)

    def scan(self) -> None:
        """One capture scan now (honours @maxtrans)."""
        cdc_admin.scan(self.conn)

    def connect(self, *, autocommit: bool = True) -> Any:
        conn = self.factory.connect(autocommit=autocommit)
        self._opened.append(conn)
        return conn

    def enable_table(
        self,
        table: str,
        *,
        schema: str = "dbo",
        capture_instance: str | None = None,
        captured_columns: Sequence[str] | None = None,
        net_changes: bool | None = None,
    ) -> None:
        cdc_admin.enable_table(  # net_changes None: net changes when the table has a key
            self.conn,
            schema,
            table,
            capture_instance=capture_instance,
            supports_net_changes=net_changes,
            captured_columns=captured_columns,
        )

    def rows(self, table: str, columns: Sequence[str], *, schema: str = "dbo") -> list[tuple]:
        cols = ", ".join(f"[{c}]" for c in columns)
        return sorted(
            tuple(r) for r in self.execute(f"SELECT {cols} FROM {quote_table(schema, table)}")
        )

    def close(self) -> None:
        for conn in [*self._opened, self.conn]:
            with contextlib.suppress(Exception):
                conn.close()


ORDERS_DDL = (
    "CREATE TABLE [dbo].[orders] ([id] int NOT NULL, [name] nvarchar(40) NULL, "
    "[amount] decimal(12,2) NULL, CONSTRAINT [pk_orders] PRIMARY KEY ([id]))"
)


@pytest.fixture
def make_cdc_db(tmp_path: Path) -> Iterator[Any]:
    """``make_cdc_db(ddl..., snapshot_isolation=True, enable=True)``: a new CDC database with the
    tables created by ``ddl`` (CREATE TABLE statements) and, with ``enable``, each enabled for
    CDC under its default capture instance and established by a first scan."""
    made: list[CdcDatabase] = []

    def make(
        *ddl: str,
        snapshot_isolation: bool = True,
        enable: bool = True,
        name: str = "salesdb",
    ) -> CdcDatabase:
        path = tmp_path / f"{name}_{len(made)}.db"
        conn = emulator.connect(str(path), autocommit=True)
        db = CdcDatabase(path, conn, EmulatorConnectionFactory(EmulatorSettings(path=path)))
        made.append(db)
        if snapshot_isolation:
            db.execute("ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON")
        cdc_admin.enable_database(db.conn)
        for statement in ddl:
            db.execute(statement)
        if enable:
            for statement in ddl:
                table = statement.split("]", 2)[1].lstrip(".[")  # CREATE TABLE [dbo].[t] ...
                db.enable_table(table)
            db.scan()
        return db

    yield make
    for db in made:
        db.close()


@pytest.fixture
def orders_db(make_cdc_db: Any) -> CdcDatabase:
    """``dbo.orders`` (id PK, name, amount), CDC enabled and established, snapshot isolation on."""
    db: CdcDatabase = make_cdc_db(ORDERS_DDL)
    return db
