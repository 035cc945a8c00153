"""Fixtures for the TDS server tests: an emulator database served over TDS on 127.0.0.1 and
connections to it through the real clients (:mod:`cdc_assets_tests.support.tds`).

``connect``/``conn``/``orders``/``source`` mirror the emulator tests' fixtures, so those tests run
unchanged through a real driver (test_emulator_semantics.py).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_assets import emulator
from cdc_assets.tds_server import TdsServer, self_signed_context
from cdc_assets.workload import Workload, create_demo_database
from cdc_assets_tests.dagster.conftest import instance  # noqa: F401 - the Dagster instance fixture
from cdc_assets_tests.emulator.test_contract import MAX_LSN, SETUP
from cdc_assets_tests.support.tds import CLIENTS, PASSWORD, USER, wire_connect


@pytest.fixture(scope="session")
def tls_context() -> ssl.SSLContext:
    context = self_signed_context()
    assert context is not None, "the openssl command is needed (scripts/setup.sh installs it)"
    return context


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "salesdb.db"


@pytest.fixture
def tds(db_path: Path, tls_context: ssl.SSLContext) -> Iterator[TdsServer]:
    emulator.connect(db_path).close()
    with TdsServer(db_path, logins={USER: PASSWORD}, tls=tls_context, lock_timeout=5) as server:
        yield server


@pytest.fixture
def shop(tmp_path: Path, tls_context: ssl.SSLContext) -> Iterator[tuple[Any, TdsServer, Workload]]:
    """The demo tables (every mapped type) with changes captured, served over TDS."""
    path = tmp_path / "salesdb.db"
    local = emulator.connect(path, autocommit=True)
    workload = create_demo_database(local, seed=3, rows_per_table=15, polling_interval=None)
    for _ in range(15):
        workload.step()
    while emulator.scan(path) > 0:
        pass
    with TdsServer(path, logins={USER: PASSWORD}, tls=tls_context) as server:
        yield local, server, workload
    local.close()


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(tds: TdsServer, client: str) -> Iterator[Callable[..., Any]]:
    """Open connections through ``client``; all are closed at the end of the test."""
    opened: list[Any] = []

    def open_connection(*, autocommit: bool = True, timeout: float = 5.0) -> Any:
        conn = wire_connect(client, tds.port, autocommit=autocommit)
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        with contextlib.suppress(Exception):
            conn.close()


@pytest.fixture
def conn(connect: Callable[..., Any]) -> Any:
    return connect()


@pytest.fixture
def login() -> str:
    """The login ``connect`` opens connections as."""
    return USER


@pytest.fixture
def orders(conn: Any, db_path: Path) -> Any:
    from cdc_assets_tests.emulator.conftest import ORDERS_DDL, enable_cdc

    conn.execute(ORDERS_DDL)
    enable_cdc(conn)
    emulator.scan(db_path)
    return conn


@pytest.fixture
def source(connect: Callable[..., Any]) -> Any:
    """test_contract's ``source``, with the driver's own exception class for error 208."""
    conn = connect()
    assert conn.execute(MAX_LSN).fetchone()[0] is None
    with pytest.raises(Exception, match=r"Invalid object name 'cdc.change_tables'"):
        conn.execute("SELECT * FROM cdc.change_tables")
    for statement in SETUP:
        conn.execute(statement)
    conn.execute("BEGIN TRAN")
    conn.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, ?), (?, ?)", 1, "a", 2, "b")
    conn.execute("COMMIT")
    conn.execute("UPDATE [dbo].[orders] SET [name] = ? WHERE [id] = ?", "bb", 2)
    conn.execute("DELETE FROM [dbo].[orders] WHERE [id] = ?", 1)
    conn.execute("EXEC sys.sp_cdc_scan")
    return conn
