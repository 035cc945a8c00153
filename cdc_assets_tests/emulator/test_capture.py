"""Change capture: what lands in the change tables, in which order, and the query functions."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_assets import emulator
from cdc_assets.emulator import Connection

from .conftest import ORDERS_DDL, all_changes, change_rows, enable_cdc, lsn_range

OP, MASK = 2, 3  # positions in all_changes rows: start_lsn, seqval, operation, update_mask, ...


def test_capture_is_asynchronous_and_honours_maxtrans(orders: Connection, db_path: Path) -> None:
    for i in range(5):
        orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (?, ?)", i, f"n{i}")
    assert change_rows(orders) == []
    before = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    assert emulator.scan(db_path, max_transactions=2) == 2
    assert len(change_rows(orders)) == 2
    orders.execute("EXEC sys.sp_cdc_scan @maxtrans = 2")
    assert len(change_rows(orders)) == 4
    assert emulator.scan(db_path) == 1
    assert emulator.scan(db_path) == 0
    after = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    assert before is None or after > before
    mapping = orders.execute(
        "SELECT start_lsn FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 ORDER BY start_lsn"
    ).fetchall()
    assert len(mapping) == 5 and mapping[-1][0] == after
    session = orders.execute(
        "SELECT TOP (1) session_id, tran_count, command_count FROM sys.dm_cdc_log_scan_sessions "
        "ORDER BY session_id DESC"
    ).fetchone()
    assert session[1] == 0


def test_order_inside_a_transaction(orders: Connection, db_path: Path) -> None:
    orders.execute("BEGIN TRAN")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a'), (2, 'b')")
    orders.execute("UPDATE [dbo].[orders] SET [name] = 'bb' WHERE [id] = 2")
    orders.execute("DELETE FROM [dbo].[orders] WHERE [id] = 1")
    orders.execute("COMMIT")
    emulator.scan(db_path)
    rows = orders.execute(
        "SELECT [__$start_lsn], [__$command_id], [__$seqval], [__$operation], [id], [name] "
        "FROM [cdc].[dbo_orders_CT] ORDER BY [__$start_lsn], [__$command_id], [__$seqval], "
        "[__$operation]"
    ).fetchall()
    assert len({r[0] for r in rows}) == 1  # one commit LSN
    assert [(r[1], r[3], r[4], r[5]) for r in rows] == [
        (1, 2, 1, "a"),
        (1, 2, 2, "b"),
        (2, 3, 2, "b"),
        (2, 4, 2, "bb"),
        (3, 1, 1, "a"),
    ]
    seqvals = [r[2] for r in rows]
    assert seqvals[2] == seqvals[3]  # before and after image share a seqval
    assert seqvals == sorted(seqvals) and len(set(seqvals)) == 4
    assert all(len(r[0]) == 10 and r[2] < r[0] for r in rows)


def test_key_update_is_delete_then_insert(orders: Connection, db_path: Path) -> None:
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    emulator.scan(db_path)
    low = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    orders.execute("UPDATE [dbo].[orders] SET [id] = [id] + 1")
    emulator.scan(db_path)
    rows = orders.execute(
        "SELECT [__$operation], [id] FROM [cdc].[dbo_orders_CT] WHERE [__$start_lsn] > ? "
        "ORDER BY [__$start_lsn], [__$command_id], [__$seqval], [__$operation]",
        low,
    ).fetchall()
    assert [r[0] for r in rows] == [1, 1, 1, 2, 2, 2]
    assert sorted(r[1] for r in rows[:3]) == [1, 2, 3] and sorted(r[1] for r in rows[3:]) == [
        2,
        3,
        4,
    ]


def test_update_masks(conn: Connection, db_path: Path) -> None:
    columns = ", ".join(f"[c{i}] int NULL" for i in range(1, 11))
    conn.execute(f"CREATE TABLE [dbo].[wide] ([id] int NOT NULL PRIMARY KEY, {columns})")
    enable_cdc(conn, "wide")
    emulator.scan(db_path)
    conn.execute("INSERT INTO [dbo].[wide] ([id], [c1]) VALUES (1, 1)")
    conn.execute("UPDATE [dbo].[wide] SET [c1] = 2, [c9] = 9 WHERE [id] = 1")
    conn.execute("UPDATE [dbo].[wide] SET [c2] = NULL WHERE [id] = 1")  # unchanged value
    conn.execute("DELETE FROM [dbo].[wide] WHERE [id] = 1")
    emulator.scan(db_path)
    rows = all_changes(conn, "dbo_wide", "all update old")
    masks = [(r[OP], r[MASK]) for r in rows]
    full = b"\x07\xff"  # 11 captured columns
    assert masks[0] == (2, full)
    assert masks[1] == (3, b"\x02\x02") and masks[2] == (4, b"\x02\x02")  # c1: 2, c9: 10
    assert masks[3][1] == b"\x00\x00"
    assert masks[-1] == (1, full)
    ordinal = conn.execute("SELECT sys.fn_cdc_get_column_ordinal('dbo_wide', 'c9')").fetchone()[0]
    assert ordinal == 10
    changed = conn.execute(
        "SELECT sys.fn_cdc_has_column_changed('dbo_wide', 'c9', ?), "
        "sys.fn_cdc_has_column_changed('dbo_wide', 'c3', ?), sys.fn_cdc_is_bit_set(2, ?)",
        masks[2][1],
        masks[2][1],
        masks[2][1],
    ).fetchone()
    assert tuple(changed) == (True, False, True)


def test_net_changes(orders: Connection, db_path: Path) -> None:
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'keep'), (2, 'gone')")
    emulator.scan(db_path)
    low = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
    low = orders.execute("SELECT sys.fn_cdc_increment_lsn(?)", low).fetchone()[0]
    orders.execute("UPDATE [dbo].[orders] SET [name] = 'kept' WHERE [id] = 1")
    orders.execute("UPDATE [dbo].[orders] SET [qty] = 5 WHERE [id] = 1")
    orders.execute("DELETE FROM [dbo].[orders] WHERE [id] = 2")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (3, 'new')")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (4, 'flash')")
    orders.execute("DELETE FROM [dbo].[orders] WHERE [id] = 4")
    emulator.scan(db_path)
    high = orders.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]

    def net(option: str) -> dict[int, tuple]:
        rows = orders.execute(
            "SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(?, ?, ?)", low, high, option
        ).fetchall()
        return {r[3]: (r[1], r[2], r[4], r[5]) for r in rows}

    assert net("all") == {
        1: (4, None, "kept", 5),
        2: (1, None, "gone", None),
        3: (2, None, "new", None),
    }
    masked = net("all with mask")
    assert masked[1][1] == b"\x06"  # name (2) and qty (3) changed
    assert masked[2][1] is None and masked[3][1] is None
    merged = net("all with merge")
    assert {k: v[0] for k, v in merged.items()} == {1: 5, 2: 1, 3: 5}
    description = orders.execute(
        "SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(?, ?, N'all')", low, high
    ).description
    assert [d[0] for d in description] == [
        "__$start_lsn",
        "__$operation",
        "__$update_mask",
        "id",
        "name",
        "qty",
    ]


def test_error_313_outside_the_validity_interval(orders: Connection, db_path: Path) -> None:
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a')")
    emulator.scan(db_path)
    low, high = lsn_range(orders)
    query = "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all')"
    assert len(orders.execute(query, low, high).fetchall()) == 1
    above = orders.execute("SELECT sys.fn_cdc_increment_lsn(?)", high).fetchone()[0]
    below = orders.execute("SELECT sys.fn_cdc_decrement_lsn(?)", low).fetchone()[0]
    for bad in ((low, above), (below, high), (high, low), (low, high, "bogus")):
        args = bad[:2]
        option = bad[2] if len(bad) > 2 else "all"
        with pytest.raises(emulator.ProgrammingError) as info:
            orders.execute(
                "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, ?)", *args, option
            )
        assert "(313)" in info.value.args[1]
        assert "cdc.fn_cdc_get_all_changes_ ..." in info.value.args[1]
    with pytest.raises(emulator.ProgrammingError, match=r"\(313\)"):
        orders.execute(
            "SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(?, ?, N'all')", low, above
        )


def test_cleanup_moves_min_lsn_and_then_313(orders: Connection, db_path: Path) -> None:
    for i in range(3):
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (?)", i)
        emulator.scan(db_path)
        time.sleep(0.01)
    mapping = orders.execute(
        "SELECT start_lsn, tran_end_time FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 "
        "ORDER BY start_lsn"
    ).fetchall()
    old_low, high = lsn_range(orders)
    future = mapping[-1][1] + dt.timedelta(minutes=10)
    deleted = emulator.cleanup(
        db_path, retention_minutes=10, now=mapping[1][1] + dt.timedelta(minutes=10)
    )
    assert deleted == 1
    new_low = orders.execute("SELECT sys.fn_cdc_get_min_lsn('dbo_orders')").fetchone()[0]
    assert new_low == mapping[1][0] > old_low
    with pytest.raises(emulator.ProgrammingError, match=r"\(313\)"):
        orders.execute(
            "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all')", old_low, high
        )
    assert (
        len(
            orders.execute(
                "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(?, ?, N'all')", new_low, high
            ).fetchall()
        )
        == 2
    )
    assert orders.execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping").fetchone()[0] == 2
    orders.execute(
        "EXEC sys.sp_cdc_cleanup_change_table @capture_instance = N'dbo_orders', "
        "@low_water_mark = ?, @threshold = 5000",
        high,
    )
    assert lsn_range(orders) == (high, high)
    assert emulator.cleanup(db_path, retention_minutes=0, now=future) == 0


def test_two_capture_instances_after_schema_change(orders: Connection, db_path: Path) -> None:
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a')")
    orders.execute("ALTER TABLE [dbo].[orders] ADD [note] nvarchar(20) NULL")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name], [note]) VALUES (2, 'b', 'x')")
    emulator.scan(db_path)
    enable_cdc(
        orders,
        capture_instance="N'dbo_orders_v2'",
        supports_net_changes=1,
        captured_column_list="N'id, name, note'",
    )
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name], [note]) VALUES (3, 'c', 'y')")
    orders.execute("ALTER TABLE [dbo].[orders] DROP COLUMN [qty]")
    orders.execute("INSERT INTO [dbo].[orders] ([id], [name], [note]) VALUES (4, 'd', 'z')")
    emulator.scan(db_path)
    v1 = change_rows(orders, "dbo_orders")
    v2 = change_rows(orders, "dbo_orders_v2")
    assert [r.id for r in v1] == [1, 2, 3, 4] and [r.id for r in v2] == [3, 4]
    assert not hasattr(v1[0], "note") and v2[0].note == "y"
    assert v1[-1].qty is None
    starts = orders.execute(
        "SELECT capture_instance, start_lsn FROM cdc.change_tables ORDER BY create_date, object_id"
    ).fetchall()
    assert starts[0][1] < starts[1][1] < v2[0][0]
    captured = orders.execute(
        "SELECT ct.capture_instance, cc.column_name FROM cdc.captured_columns AS cc "
        "JOIN cdc.change_tables AS ct ON ct.object_id = cc.object_id "
        "ORDER BY ct.capture_instance, cc.column_ordinal"
    ).fetchall()
    assert [tuple(r) for r in captured] == [
        ("dbo_orders", "id"),
        ("dbo_orders", "name"),
        ("dbo_orders", "qty"),
        ("dbo_orders_v2", "id"),
        ("dbo_orders_v2", "name"),
        ("dbo_orders_v2", "note"),
    ]
    history = orders.execute(
        "SELECT ct.capture_instance, h.ddl_command, h.ddl_lsn FROM cdc.ddl_history AS h "
        "JOIN cdc.change_tables AS ct ON ct.object_id = h.object_id ORDER BY h.ddl_lsn"
    ).fetchall()
    assert [(r[0], r[1].split()[3]) for r in history] == [
        ("dbo_orders", "ADD"),
        ("dbo_orders", "DROP"),
        ("dbo_orders_v2", "DROP"),
    ]
    with pytest.raises(emulator.ProgrammingError, match=r"\(22962\)"):
        enable_cdc(orders, capture_instance="N'dbo_orders_v3'")
    orders.execute(
        "EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = N'orders', "
        "@capture_instance = N'dbo_orders'"
    )
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        orders.execute("SELECT * FROM [cdc].[dbo_orders_CT]")
    assert len(change_rows(orders, "dbo_orders_v2")) == 2


def test_admin_errors(conn: Connection) -> None:
    conn.execute("CREATE TABLE [dbo].[heap] ([a] int NULL)")
    with pytest.raises(emulator.ProgrammingError, match=r"\(22901\)"):
        conn.execute(
            "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'heap', "
            "@role_name = NULL"
        )
    conn.execute("EXEC sys.sp_cdc_enable_db")
    with pytest.raises(emulator.ProgrammingError, match=r"\(22939\)"):
        enable_cdc(conn, "heap", supports_net_changes=1)
    with pytest.raises(emulator.ProgrammingError, match=r"\(201\)"):
        conn.execute("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'heap'")
    with pytest.raises(emulator.ProgrammingError, match=r"\(8145\)"):
        conn.execute("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @bogus = 1")
    enable_cdc(conn, "heap")
    with pytest.raises(emulator.ProgrammingError, match=r"\(22926\)"):
        enable_cdc(conn, "heap")
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        conn.execute("SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_heap(?, ?, N'all')", b"", b"")
    help_rows = conn.execute("EXEC sys.sp_cdc_help_change_data_capture").fetchall()
    assert help_rows[0].capture_instance == "dbo_heap" and help_rows[0].index_column_list is None


def test_agent_follows_polling_interval_and_stop_job(orders: Connection, db_path: Path) -> None:
    orders.execute(
        "EXEC sys.sp_cdc_change_job @job_type = N'capture', @pollinginterval = 1, @maxtrans = 500"
    )
    with emulator.CaptureAgent(db_path, check_interval=0.05) as agent:
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (1)")
        _wait(lambda: len(change_rows(orders)) == 1, 3.0)
        orders.execute("EXEC sys.sp_cdc_stop_job @job_type = N'capture'")
        time.sleep(0.2)
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (2)")
        time.sleep(1.3)
        assert len(change_rows(orders)) == 1
        orders.execute("EXEC sys.sp_cdc_start_job @job_type = N'capture'")
        _wait(lambda: len(change_rows(orders)) == 2, 3.0)
        started = time.monotonic()
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (3)")
        _wait(lambda: len(change_rows(orders)) == 3, 3.0)
        assert time.monotonic() - started < 2.0
        assert not agent.errors


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_change_data_survives_new_connections(
    connect: Callable[..., Connection], db_path: Path
) -> None:
    first = connect()
    first.execute(ORDERS_DDL)
    enable_cdc(first)
    first.execute("INSERT INTO [dbo].[orders] ([id], [name]) VALUES (1, 'a')")
    first.close()
    emulator.scan(db_path)
    second = connect()
    rows = all_changes(second)
    assert [(r[OP], r[4]) for r in rows] == [(2, 1)]


def test_time_to_lsn_operators_and_help_procedures(orders: Connection, db_path: Path) -> None:
    for i in range(3):
        orders.execute("INSERT INTO [dbo].[orders] ([id]) VALUES (?)", i)
        time.sleep(0.02)
    orders.execute("ALTER TABLE [dbo].[orders] ADD [extra] int NULL")
    emulator.scan(db_path)
    mapping = orders.execute(
        "SELECT start_lsn, tran_end_time FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 "
        "ORDER BY start_lsn"
    ).fetchall()
    middle_time = mapping[1][1]

    def to_lsn(operator: str) -> bytes | None:
        return orders.execute(
            f"SELECT sys.fn_cdc_map_time_to_lsn(N'{operator}', ?)", middle_time
        ).fetchone()[0]

    assert to_lsn("largest less than") == mapping[0][0]
    assert to_lsn("largest less than or equal") == mapping[1][0]
    assert to_lsn("smallest greater than") == mapping[2][0]
    assert to_lsn("smallest greater than or equal") == mapping[1][0]
    operator = orders.execute(
        "SELECT sys.fn_cdc_map_time_to_lsn(?, ?)", "smallest greater than", middle_time
    ).fetchone()[0]
    assert operator == mapping[2][0]
    jobs = orders.execute("EXEC sys.sp_cdc_help_jobs").fetchall()
    assert [j.job_type for j in jobs] == ["capture", "cleanup"]
    columns = orders.execute(
        "EXEC sys.sp_cdc_get_captured_columns @capture_instance = N'dbo_orders'"
    ).fetchall()
    assert [(c.column_name, c.ordinal_position, c.data_type) for c in columns] == [
        ("id", 1, "int"),
        ("name", 2, "nvarchar"),
        ("qty", 3, "int"),
    ]
    history = orders.execute(
        "EXEC sys.sp_cdc_get_ddl_history @capture_instance = N'dbo_orders'"
    ).fetchall()
    assert len(history) == 1 and history[0].ddl_command.startswith("ALTER TABLE")
    assert isinstance(history[0].ddl_lsn, bytes) and history[0].ddl_lsn > mapping[-1][0]


def test_writes_that_cannot_be_emulated_exactly_are_refused(orders: Connection) -> None:
    orders.execute(
        "CREATE TABLE [dbo].[ledger] ([id] int NOT NULL PRIMARY KEY, [total] decimal(38,10) NULL, "
        "[at] datetime2(7) NULL)"
    )
    orders.execute("INSERT INTO [dbo].[ledger] VALUES (1, 1.5, '2024-01-01T10:00:00')")
    with pytest.raises(emulator.NotSupportedError):
        orders.execute("UPDATE [dbo].[ledger] SET [total] = [total] * 2")
    with pytest.raises(emulator.NotSupportedError):
        orders.execute("UPDATE [dbo].[ledger] SET [at] = [name] FROM [dbo].[orders]")
    with pytest.raises(emulator.NotSupportedError):
        orders.execute("SELECT SUM([total]) FROM [dbo].[ledger]")
    orders.execute("UPDATE [dbo].[ledger] SET [total] = ?, [at] = SYSDATETIME()", "2.25")
    total, at = orders.execute("SELECT [total], [at] FROM [dbo].[ledger]").fetchone()
    assert total == Decimal("2.2500000000") and isinstance(at, dt.datetime)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_net_changes_bring_a_snapshot_to_the_final_state(
    tmp_path: Path, data: st.DataObject
) -> None:
    path = tmp_path / f"net_{uuid.uuid4().hex}.db"
    conn = emulator.connect(path, autocommit=True)
    try:
        conn.execute(ORDERS_DDL)
        enable_cdc(conn)
        emulator.scan(path)
        keys = st.integers(1, 8)

        def random_transactions(count: int) -> None:
            for _ in range(count):
                conn.execute("BEGIN TRAN")
                for _ in range(data.draw(st.integers(1, 3))):
                    kind = data.draw(st.sampled_from(["insert", "update", "delete", "rekey"]))
                    key = data.draw(keys)
                    exists = conn.execute(
                        "SELECT COUNT(*) FROM [dbo].[orders] WHERE [id] = ?", key
                    ).fetchone()[0]
                    if kind == "insert" and not exists:
                        conn.execute(
                            "INSERT INTO [dbo].[orders] ([id], [name], [qty]) VALUES (?, ?, ?)",
                            key,
                            f"n{key}",
                            key,
                        )
                    elif kind == "update" and exists:
                        conn.execute(
                            "UPDATE [dbo].[orders] SET [qty] = [qty] + 1 WHERE [id] = ?", key
                        )
                    elif kind == "delete":
                        conn.execute("DELETE FROM [dbo].[orders] WHERE [id] = ?", key)
                    elif kind == "rekey" and exists:
                        new = data.draw(keys)
                        taken = conn.execute(
                            "SELECT COUNT(*) FROM [dbo].[orders] WHERE [id] = ?", new
                        ).fetchone()[0]
                        if not taken:
                            conn.execute(
                                "UPDATE [dbo].[orders] SET [id] = ? WHERE [id] = ?", new, key
                            )
                conn.execute("COMMIT" if data.draw(st.integers(0, 4)) else "ROLLBACK")

        random_transactions(data.draw(st.integers(0, 4)))
        emulator.scan(path)
        snapshot = {
            r[0]: tuple(r) for r in conn.execute("SELECT [id], [name], [qty] FROM [dbo].[orders]")
        }
        low = conn.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
        low = bytes(10) if low is None else low
        low = max(low, conn.execute("SELECT sys.fn_cdc_get_min_lsn('dbo_orders')").fetchone()[0])
        random_transactions(data.draw(st.integers(1, 5)))
        emulator.scan(path)
        final = {
            r[0]: tuple(r) for r in conn.execute("SELECT [id], [name], [qty] FROM [dbo].[orders]")
        }
        high = conn.execute("SELECT sys.fn_cdc_get_max_lsn()").fetchone()[0]
        start = conn.execute("SELECT sys.fn_cdc_increment_lsn(?)", low).fetchone()[0]
        if high is None or start > high:
            assert final == snapshot
            return
        for option in ("all", "all with merge"):
            state = dict(snapshot)
            for row in conn.execute(
                "SELECT * FROM cdc.fn_cdc_get_net_changes_dbo_orders(?, ?, ?)", start, high, option
            ):
                if row[1] == 1:
                    assert state.pop(row.id) is not None
                else:
                    assert (row[1] == 2) == (row.id not in state) or row[1] == 5
                    state[row.id] = (row.id, row.name, row.qty)
            assert state == final, option
    finally:
        conn.close()
