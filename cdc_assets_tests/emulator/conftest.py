"""Fixtures for the emulator tests: a fresh database file per test and CDC helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "salesdb.db"


@pytest.fixture
def connect(db_path: Path) -> Iterator[Callable[..., Connection]]:
    """Open connections to the test database; all are closed at the end of the test."""
    opened: list[Connection] = []

    def open_connection(*, autocommit: bool = True, timeout: float = 5.0) -> Connection:
        conn = emulator.connect(db_path, autocommit=autocommit, timeout=timeout)
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        conn.close()


@pytest.fixture
def conn(connect: Callable[..., Connection]) -> Connection:
    return connect()


@pytest.fixture
def login() -> str:
    """The login ``connect`` opens connections as (a local connection: sa)."""
    return "sa"


ORDERS_DDL = (
    "CREATE TABLE [dbo].[orders] ([id] int NOT NULL, [name] nvarchar(50) NULL, "
    "[qty] int NULL, CONSTRAINT [pk_orders] PRIMARY KEY ([id]))"
)


def enable_cdc(conn: Connection, table: str = "orders", **options: object) -> None:
    """``sp_cdc_enable_db`` (once) and ``sp_cdc_enable_table`` for ``dbo.<table>``."""
    enabled = conn.execute(
        "SELECT is_cdc_enabled FROM sys.databases WHERE database_id = DB_ID()"
    ).fetchone()[0]
    if not enabled:
        conn.execute("EXEC sys.sp_cdc_enable_db")
    args = ", ".join(f"@{k} = {v}" for k, v in options.items())
    conn.execute(
        f"EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'{table}', "
        f"@role_name = NULL{', ' + args if args else ''}"
    )


@pytest.fixture
def orders(conn: Connection, db_path: Path) -> Connection:
    """``dbo.orders`` created and enabled for CDC, the instance's start established by a scan."""
    conn.execute(ORDERS_DDL)
    enable_cdc(conn)
    emulator.scan(db_path)
    return conn


def lsn_range(conn: Connection, instance: str = "dbo_orders") -> tuple[bytes, bytes]:
    low = conn.execute("SELECT sys.fn_cdc_get_min_lsn(?)", instance).fetchone()[0]
    high = conn.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    return low, high


def all_changes(conn: Connection, instance: str = "dbo_orders", option: str = "all") -> list:
    low, high = lsn_range(conn, instance)
    return conn.execute(
        f"SELECT * FROM cdc.fn_cdc_get_all_changes_{instance}(?, ?, N'{option}')", low, high
    ).fetchall()


def change_rows(conn: Connection, instance: str = "dbo_orders") -> list:
    return conn.execute(
        f"SELECT * FROM [cdc].[{instance}_CT] ORDER BY [__$start_lsn], [__$command_id], "
        "[__$seqval], [__$operation]"
    ).fetchall()
