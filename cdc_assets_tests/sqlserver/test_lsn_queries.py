"""LSN functions against the emulator, including the retryable not-ready states."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.errors import CaptureInstanceNotFound, CaptureNotReady
from cdc_assets.sqlserver.lsn_queries import (
    decrement_lsn,
    get_max_lsn,
    get_min_lsn,
    increment_lsn,
    map_lsn_to_time,
    map_time_to_lsn,
    wait_for_max_lsn,
)

from .conftest import ORDERS_DDL, CdcDatabase


def test_not_ready_before_the_first_scan(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, enable=False)
    db.enable_table("orders")
    with pytest.raises(CaptureNotReady) as info:
        get_max_lsn(db.conn)
    assert info.value.retryable and "SQL Server Agent" in info.value.hint
    with pytest.raises(CaptureNotReady, match="not established"):
        get_min_lsn(db.conn, "dbo_orders")
    db.scan()
    assert get_min_lsn(db.conn, "dbo_orders") <= get_max_lsn(db.conn)


def test_unknown_instance(orders_db: CdcDatabase) -> None:
    with pytest.raises(CaptureInstanceNotFound) as info:
        get_min_lsn(orders_db.conn, "dbo_nothing")
    assert not info.value.retryable and info.value.capture_instance == "dbo_nothing"


def test_increment_decrement_and_time_mapping(orders_db: CdcDatabase) -> None:
    db = orders_db
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    db.scan()
    top = get_max_lsn(db.conn)
    assert increment_lsn(db.conn, top) == top.increment()
    assert decrement_lsn(db.conn, top) == top.decrement()
    commit = map_lsn_to_time(db.conn, top)
    assert isinstance(commit, dt.datetime)
    assert map_time_to_lsn(db.conn, commit) == top
    assert map_time_to_lsn(db.conn, commit - dt.timedelta(days=1)) is None


def test_wait_for_max_lsn(orders_db: CdcDatabase) -> None:
    db = orders_db
    top = get_max_lsn(db.conn)
    assert wait_for_max_lsn(db.conn, top, timeout_s=0.1) == top
    with pytest.raises(CaptureNotReady, match="did not reach"):
        wait_for_max_lsn(db.conn, top.increment(), timeout_s=0.2, poll_s=0.05)
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")

    def scan_later() -> None:
        time.sleep(0.3)
        conn = db.factory.connect()
        cdc_admin.scan(conn)
        conn.close()

    thread = threading.Thread(target=scan_later)
    thread.start()
    reached = wait_for_max_lsn(db.conn, top.increment(), timeout_s=10, poll_s=0.05)
    thread.join()
    assert isinstance(reached, Lsn) and reached > top
