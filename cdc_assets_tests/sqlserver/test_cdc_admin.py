"""The CDC administration calls against the emulator: what each one changes, names with quotes and
brackets, parameters as ``?``, the literal text an operator copies, errors translated."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.lsn import Lsn
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.errors import SqlServerError
from cdc_assets.sqlserver.health import get_cdc_jobs, get_job_running
from cdc_assets.sqlserver.lsn_queries import find_max_lsn, get_max_lsn, get_min_lsn
from cdc_assets.sqlserver.quoting import InvalidIdentifier

from .conftest import ORDERS_DDL, CdcDatabase

ODD_DDL = (
    "CREATE TABLE [dbo].[it's [odd]]] ([id] int NOT NULL, [a b] int NULL, [c] int NULL, "
    "CONSTRAINT [pk_odd] PRIMARY KEY ([id]))"
)


def _instances(db: CdcDatabase) -> dict[str, tuple[Any, ...]]:
    rows = db.execute(
        "SELECT ct.capture_instance, OBJECT_NAME(ct.source_object_id), ct.supports_net_changes, "
        "ct.role_name, ct.index_name FROM cdc.change_tables AS ct"
    ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def _captured(db: CdcDatabase, instance: str) -> list[str]:
    rows = db.execute(
        "SELECT cc.column_name FROM cdc.captured_columns AS cc JOIN cdc.change_tables AS ct "
        "ON ct.object_id = cc.object_id WHERE ct.capture_instance = ? ORDER BY cc.column_ordinal",
        instance,
    ).fetchall()
    return [r[0] for r in rows]


def test_enable_database_and_a_table(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL, enable=False)
    db.execute("EXEC sys.sp_cdc_disable_db")
    assert cdc_admin.database_enabled(db.conn) is False
    cdc_admin.enable_database(db.conn)
    assert cdc_admin.database_enabled(db.conn) is True
    cdc_admin.enable_table(db.conn, "dbo", "orders")
    assert _instances(db) == {"dbo_orders": ("orders", True, None, "pk_orders")}
    assert _captured(db, "dbo_orders") == ["id", "name", "amount"]


def test_enable_table_options_and_names_with_quotes_and_brackets(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ODD_DDL, enable=False)
    cdc_admin.enable_table(
        db.conn,
        "dbo",
        "it's [odd]",
        capture_instance="odd_v1",
        supports_net_changes=False,
        captured_columns=["id", "a b"],
    )
    cdc_admin.enable_table(
        db.conn, "dbo", "it's [odd]", capture_instance="odd_v2", index_name="pk_odd"
    )
    assert _instances(db) == {
        "odd_v1": ("it's [odd]", False, None, "pk_odd"),
        "odd_v2": ("it's [odd]", True, None, "pk_odd"),
    }
    assert _captured(db, "odd_v1") == ["id", "a b"]
    assert _captured(db, "odd_v2") == ["id", "a b", "c"]
    cdc_admin.disable_table(db.conn, "dbo", "it's [odd]", "odd_v1")
    assert list(_instances(db)) == ["odd_v2"]
    cdc_admin.disable_table(db.conn, "dbo", "it's [odd]")
    assert _instances(db) == {}


def test_errors_are_translated(make_cdc_db: Any) -> None:
    db: CdcDatabase = make_cdc_db(ORDERS_DDL)
    with pytest.raises(SqlServerError, match="already exists"):
        cdc_admin.enable_table(db.conn, "dbo", "orders", capture_instance="dbo_orders")
    with pytest.raises(SqlServerError, match="Could not find capture instance 'nope'"):
        cdc_admin.disable_table(db.conn, "dbo", "orders", "nope")
    with pytest.raises(InvalidIdentifier):
        cdc_admin.enable_table(db.conn, "dbo", "")
    with pytest.raises(ValueError, match="'capture' or 'cleanup'"):
        cdc_admin.start_job(db.conn, "nightly")  # type: ignore[arg-type]


def test_jobs_stop_start_and_change(orders_db: CdcDatabase) -> None:
    db = orders_db
    assert get_job_running(db.conn) is True
    cdc_admin.stop_job(db.conn)
    assert get_job_running(db.conn) is False
    cdc_admin.start_job(db.conn)
    assert get_job_running(db.conn) is True
    cdc_admin.stop_job(db.conn, "cleanup")
    assert get_job_running(db.conn, "cleanup") is False
    assert get_job_running(db.conn) is True
    cdc_admin.change_job(db.conn, maxtrans=7, polling_interval=3, continuous=True)
    cdc_admin.change_job(db.conn, "cleanup", retention=90, threshold=1000)
    cdc_admin.restart_job(db.conn)
    assert get_job_running(db.conn) is True
    jobs = get_cdc_jobs(db.conn)
    assert (jobs["capture"].maxtrans, jobs["capture"].polling_interval_s) == (7, 3)
    assert (jobs["cleanup"].retention_minutes, jobs["cleanup"].threshold) == (90, 1000)


def test_scan_honours_maxtrans(orders_db: CdcDatabase) -> None:
    db = orders_db
    before = get_max_lsn(db.conn)
    for i in range(3):
        db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (?)", i)
    cdc_admin.scan(db.conn, maxtrans=2)
    middle = get_max_lsn(db.conn)
    cdc_admin.scan(db.conn)
    after = get_max_lsn(db.conn)
    assert before < middle < after
    counted = db.execute("SELECT COUNT(*) FROM [cdc].[dbo_orders_CT]").fetchone()[0]
    assert counted == 3
    cdc_admin.scan(db.conn, maxtrans=1, maxscans=5)
    assert find_max_lsn(db.conn) == after


def test_cleanup_change_table_moves_the_min_lsn(orders_db: CdcDatabase) -> None:
    db = orders_db
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
    db.scan()
    first = get_max_lsn(db.conn)
    db.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
    db.scan()
    assert get_min_lsn(db.conn, "dbo_orders") < first
    cdc_admin.cleanup_change_table(db.conn, "dbo_orders", get_max_lsn(db.conn), threshold=10)
    assert get_min_lsn(db.conn, "dbo_orders") == get_max_lsn(db.conn)
    remaining = db.execute("SELECT [id] FROM [cdc].[dbo_orders_CT]").fetchall()
    assert [r[0] for r in remaining] == [2]
    with pytest.raises(SqlServerError, match="retention period"):
        cdc_admin.cleanup_change_table(db.conn, "dbo_orders", Lsn(b"\xff" * 10))


def test_statements_send_parameters_and_show_literals() -> None:
    statement = cdc_admin.enable_table_statement(
        "dbo", "it's", supports_net_changes=False, captured_columns=["a", "b c"]
    )
    assert statement.sql == (
        "EXEC sys.sp_cdc_enable_table @source_schema = ?, @source_name = ?, @role_name = ?, "
        "@supports_net_changes = ?, @captured_column_list = ?"
    )
    assert statement.params == ("dbo", "it's", None, False, "a, b c")
    assert statement.text == (
        "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'it''s', "
        "@role_name = NULL, @supports_net_changes = 0, @captured_column_list = N'a, b c'"
    )
    assert (
        cdc_admin.start_job_statement().text == "EXEC sys.sp_cdc_start_job @job_type = N'capture'"
    )
    assert cdc_admin.stop_job_statement("cleanup").sql == "EXEC sys.sp_cdc_stop_job @job_type = ?"
    mark = cdc_admin.Statement(
        "sp_cdc_cleanup_change_table", (("low_water_mark", Lsn(b"\x01" * 10)),)
    )
    assert mark.params == (b"\x01" * 10,)
    assert mark.text.endswith("@low_water_mark = 0x01010101010101010101")
    assert cdc_admin.Statement("sp_cdc_enable_db").sql == "EXEC sys.sp_cdc_enable_db"
