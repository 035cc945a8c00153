"""Capture health against the emulator: jobs, last scan, LSN interval, the job stopped."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.health import CaptureHealth, capture_health
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn

from .conftest import CdcDatabase


def test_healthy_capture(orders_db: CdcDatabase) -> None:
    db = orders_db
    cdc_admin.change_job(db.conn, "capture", polling_interval=2)
    cdc_admin.change_job(db.conn, "cleanup", retention=60)
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    db.scan()
    health = capture_health(db.conn)
    assert health.job_configured is True and health.continuous is True
    assert health.polling_interval_s == 2 and health.maxtrans == 500
    assert health.retention_minutes == 60
    assert health.max_lsn == get_max_lsn(db.conn)
    assert isinstance(health.max_lsn_time, dt.datetime)
    assert health.min_lsn_per_instance == {"dbo_orders": get_min_lsn(db.conn, "dbo_orders")}
    assert isinstance(health.last_scan_end, dt.datetime) and health.latency_s is not None
    assert health.last_scan_errors == 0
    age = health.seconds_since_last_scan
    assert age is not None and -1 < age < 60
    assert health.job_running is True and not health.stopped


def test_capture_job_stopped(orders_db: CdcDatabase) -> None:
    db = orders_db
    running = capture_health(db.conn)
    cdc_admin.stop_job(db.conn, "capture")
    stopped = capture_health(db.conn)
    assert stopped.job_configured is True
    assert stopped.unavailable == ()
    assert running.job_running is True
    assert stopped.job_running is False
    assert stopped.stopped
    cdc_admin.start_job(db.conn, "capture")
    assert capture_health(db.conn).job_running is True


def test_cdc_enabled_but_nothing_captured(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db()
    health = capture_health(db.conn)
    assert health.job_configured is False  # the jobs come with the first captured table
    assert health.max_lsn is None and health.min_lsn_per_instance == {}


def test_stopped_only_for_a_continuous_job_agent_reports_not_running() -> None:
    """A one-shot (scheduled) capture job is "not running" between its runs: not stopped."""
    health = CaptureHealth(
        job_configured=True,
        polling_interval_s=5,
        maxtrans=500,
        retention_minutes=4320,
        last_scan_end=None,
        latency_s=900,
        max_lsn=Lsn.ZERO.increment(),
        max_lsn_time=None,
        min_lsn_per_instance={},
        job_running=False,
        last_scan_errors=2,
    )
    assert health.stopped  # continuous unknown: a job Agent reports not running is stopped
    assert dataclasses.replace(health, continuous=True).stopped
    assert not dataclasses.replace(health, continuous=False).stopped
    assert not dataclasses.replace(health, job_running=None).stopped  # not visible: unknown
    assert health.seconds_since_last_scan is None
