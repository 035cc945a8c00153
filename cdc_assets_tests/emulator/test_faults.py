"""Injected network faults: an unreachable server at connect, a connection dropped mid-result;
each fires its number of times across connections and then the network is back."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import faults
from cdc_assets.sqlserver.errors import SourceUnreachable, translate_dbapi_error


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "faults.db"
    conn = emulator.connect(path, autocommit=True)
    conn.execute("CREATE TABLE dbo.t (id int PRIMARY KEY, v nvarchar(10))")
    conn.cursor().executemany("INSERT INTO dbo.t VALUES (?, ?)", [(i, f"v{i}") for i in range(20)])
    conn.close()
    return path


def test_unreachable_fires_its_times_then_connects(db: Path) -> None:
    faults.inject(db, faults.Fault("unreachable", times=2))
    for _ in range(2):
        with pytest.raises(emulator.OperationalError) as info:
            emulator.connect(db)
        error = translate_dbapi_error(info.value)
        assert isinstance(error, SourceUnreachable) and error.native_error == 10061
        assert "Check server" in error.hint
    emulator.connect(db).close()
    assert faults.remaining(db) == []


def test_dropped_mid_result_hands_out_rows_then_fails_and_closes(db: Path) -> None:
    faults.inject(db, faults.Fault("dropped", after_rows=7, match="dbo.t"))
    conn = emulator.connect(db, autocommit=True)
    assert conn.execute("SELECT COUNT(*) FROM sys.objects").fetchall()  # no match: untouched
    cursor = conn.execute("SELECT id FROM dbo.t ORDER BY id")
    got = cursor.fetchmany(5) + cursor.fetchmany(5)
    assert [r[0] for r in got] == list(range(7))  # the rows before the drop, then the drop
    with pytest.raises(emulator.OperationalError) as info:
        cursor.fetchmany(5)
    error = translate_dbapi_error(info.value)
    assert isinstance(error, SourceUnreachable) and error.native_error == 10054
    assert "retries the range" in error.hint
    assert conn.closed
    cursor.close()  # closing what is left of a dropped connection does not raise
    conn = emulator.connect(db, autocommit=True)  # the fault fired its one time
    assert len(conn.execute("SELECT id FROM dbo.t").fetchall()) == 20
    conn.close()


def test_driver18_communication_link_failure_is_a_lost_connection() -> None:
    error = translate_dbapi_error(
        emulator.OperationalError(
            "08S01",
            "[08S01] [Microsoft][ODBC Driver 18 for SQL Server]Communication link failure (0) "
            "(SQLFetch)",
        )
    )
    assert isinstance(error, SourceUnreachable) and "lost in the middle" in error.hint
