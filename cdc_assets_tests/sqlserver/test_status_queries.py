"""The statements the CLI's status and the benchmarks send, through the SQL Server layer, against
the emulator: jobs, the last scan, job activity, row counts, the newest transaction, commits."""

from __future__ import annotations

import datetime as dt
from typing import Any

from cdc_assets.sqlserver import (
    cdc_admin,
    changed_lsns,
    count_change_rows,
    count_rows,
    find_max_lsn,
    get_cdc_jobs,
    get_job_running,
    get_last_scan,
    get_max_lsn,
    get_server_time,
    last_transaction_lsn,
    set_cleanup_retention,
    table_exists,
    transaction_commits,
)
from cdc_assets.sqlserver.lsn_queries import map_lsn_to_time

from .conftest import CdcDatabase


def test_jobs_last_scan_and_job_activity(orders_db: CdcDatabase) -> None:
    db = orders_db
    cdc_admin.change_job(db.conn, "capture", polling_interval=2)
    set_cleanup_retention(db.conn, 60)
    jobs = get_cdc_jobs(db.conn)
    assert set(jobs) == {"capture", "cleanup"}
    assert jobs["capture"].polling_interval_s == 2 and jobs["capture"].continuous is True
    assert jobs["cleanup"].retention_minutes == 60 and jobs["cleanup"].threshold == 5000
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1), (2)")
    db.scan()
    scan = get_last_scan(db.conn)
    assert scan is not None and scan.tran_count == 1 and scan.command_count == 2
    assert isinstance(scan.end_time, dt.datetime) and scan.error_count == 0
    assert get_job_running(db.conn, "capture") and get_job_running(db.conn, "cleanup")
    cdc_admin.stop_job(db.conn, "cleanup")
    assert get_job_running(db.conn, "capture") and not get_job_running(db.conn, "cleanup")
    now = get_server_time(db.conn)
    assert now is not None and abs((now - dt.datetime.now()).total_seconds()) < 60


def test_counts_and_existence(orders_db: CdcDatabase) -> None:
    db = orders_db
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1), (2), (3)")
    db.execute("DELETE FROM [dbo].[orders] WHERE [id] = 2")
    db.scan()
    assert count_rows(db.conn, "dbo", "orders") == 2
    assert count_change_rows(db.conn, "dbo_orders") == 4  # three inserts and a delete
    assert table_exists(db.conn, "dbo", "orders")
    assert not table_exists(db.conn, "dbo", "no such table")


def test_newest_transaction_and_commits(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(
        "CREATE TABLE [dbo].[a] ([id] int NOT NULL PRIMARY KEY)",
        "CREATE TABLE [dbo].[b] ([id] int NOT NULL PRIMARY KEY)",
    )
    assert last_transaction_lsn(db.conn) is None  # only the capture job's progress rows
    start = get_max_lsn(db.conn)
    db.execute("INSERT INTO [dbo].[a] ([id]) VALUES (1)")
    db.execute("INSERT INTO [dbo].[b] ([id]) VALUES (1)")
    db.execute("BEGIN TRANSACTION")
    db.execute("INSERT INTO [dbo].[a] ([id]) VALUES (2)")
    db.execute("INSERT INTO [dbo].[b] ([id]) VALUES (2)")
    db.execute("COMMIT TRANSACTION")
    db.scan()
    commits = transaction_commits(db.conn, start)
    lsns = [lsn for lsn, _ in commits]
    assert len(commits) == 3 and lsns == sorted(lsns) and lsns[0] > start
    assert all(when == map_lsn_to_time(db.conn, lsn) for lsn, when in commits)
    assert last_transaction_lsn(db.conn) == lsns[-1]
    assert (find_max_lsn(db.conn) or start) >= lsns[-1]
    assert transaction_commits(db.conn, lsns[0]) == commits[1:]
    assert changed_lsns(db.conn, "dbo_a") == {lsns[0], lsns[2]}
    assert changed_lsns(db.conn, "dbo_b") == {lsns[1], lsns[2]}
