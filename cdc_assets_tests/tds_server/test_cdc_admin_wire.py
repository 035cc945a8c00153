"""The CDC administration calls (:mod:`cdc_assets.sqlserver.cdc_admin`) through each real client:
their ``?`` parameters (names, NULL, bits, ints, a binary(10) LSN) reach ``EXEC`` as values."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.sqlserver import cdc_admin
from cdc_assets.sqlserver.errors import SqlServerError
from cdc_assets.sqlserver.health import get_cdc_jobs, get_job_running
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn


def test_admin_calls_over_the_wire(conn: Any) -> None:
    assert cdc_admin.database_enabled(conn) is False
    cdc_admin.enable_database(conn)
    assert cdc_admin.database_enabled(conn) is True
    conn.execute(
        "CREATE TABLE [dbo].[it's [odd]]] ([id] int NOT NULL, [a b] int NULL, "
        "CONSTRAINT [pk_odd] PRIMARY KEY ([id]))"
    )
    cdc_admin.enable_table(
        conn, "dbo", "it's [odd]", capture_instance="odd", supports_net_changes=False,
        captured_columns=["id", "a b"],
    )  # fmt: skip
    rows = conn.execute(
        "SELECT capture_instance, supports_net_changes, role_name FROM cdc.change_tables"
    ).fetchall()
    assert [tuple(r) for r in rows] == [("odd", False, None)]
    cdc_admin.change_job(conn, maxtrans=5, polling_interval=2)
    cdc_admin.restart_job(conn)
    assert get_job_running(conn) is True
    assert get_cdc_jobs(conn)["capture"].maxtrans == 5
    cdc_admin.stop_job(conn)
    assert get_job_running(conn) is False
    cdc_admin.start_job(conn)
    conn.execute("INSERT INTO [dbo].[it's [odd]]] ([id], [a b]) VALUES (1, 2), (3, 4)")
    conn.execute("INSERT INTO [dbo].[it's [odd]]] ([id], [a b]) VALUES (5, 6)")
    cdc_admin.scan(conn, maxtrans=1)
    assert conn.execute("SELECT COUNT(*) FROM [cdc].[odd_CT]").fetchone()[0] == 2
    cdc_admin.scan(conn)
    assert conn.execute("SELECT COUNT(*) FROM [cdc].[odd_CT]").fetchone()[0] == 3
    cdc_admin.cleanup_change_table(conn, "odd", get_max_lsn(conn))
    assert get_min_lsn(conn, "odd") == get_max_lsn(conn)
    assert conn.execute("SELECT COUNT(*) FROM [cdc].[odd_CT]").fetchone()[0] == 1
    with pytest.raises(SqlServerError, match="odd"):
        cdc_admin.disable_table(conn, "dbo", "it's [odd]", "odd_v9")
    cdc_admin.disable_table(conn, "dbo", "it's [odd]")
    assert conn.execute("SELECT COUNT(*) FROM cdc.change_tables").fetchone()[0] == 0
