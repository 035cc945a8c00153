"""The ``cdc-assets`` command line: create, status, workload, and one-line errors (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.cli import main
from cdc_assets.sqlserver import count_change_rows, discover, find_max_lsn
from cdc_assets.workload import DEMO_TABLES


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "demo" / "source.db"
    assert main(["emulator", "create", str(path), "--rows", "20", "--seed", "3"]) == 0
    return path


def test_create_makes_the_demo_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "new" / "source.db"
    assert main(["emulator", "create", str(source), "--rows", "20"]) == 0
    out = capsys.readouterr().out
    assert f"created {source}" in out
    assert "[dbo].[order lines]" in out
    with emulator.connect(source, autocommit=True) as conn:
        for table in DEMO_TABLES:
            count = conn.execute(f"SELECT COUNT(*) FROM {table.quoted}").fetchone()[0]
            assert count == 20, table.full_name
        assert conn.execute(
            "SELECT is_cdc_enabled, snapshot_isolation_state_desc FROM sys.databases "
            "WHERE database_id = DB_ID()"
        ).fetchone() == (True, "ON")
        # as SQL Server is once its capture job has scanned: every capture instance established
        # (a code location lists the table) and the initial rows in its change table
        found = discover(conn)
        for table in DEMO_TABLES:
            instance = found[(table.schema, table.name)].current_instance
            assert instance is not None and instance.name == table.capture_instance
            assert count_change_rows(conn, instance.name) == 20, table.full_name
    assert "captured, every capture instance established" in out


def test_create_refuses_to_overwrite_unless_forced(
    source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["emulator", "create", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    assert main(["emulator", "create", str(source), "--rows", "3", "--force"]) == 0
    with emulator.connect(source, autocommit=True) as conn:
        assert conn.execute("SELECT COUNT(*) FROM [dbo].[customers]").fetchone()[0] == 3


def test_status_reports_lsns_and_change_tables(
    source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emulator.scan(source)
    capsys.readouterr()
    assert main(["emulator", "status", str(source)]) == 0
    out = capsys.readouterr().out
    assert "CDC enabled" in out and "snapshot isolation ON" in out
    assert "max LSN  0x" in out
    assert "capture job  started" in out
    for table in DEMO_TABLES:
        line = next(x for x in out.splitlines() if x.startswith(table.capture_instance + " "))
        assert "0x" in line and " 20 " in line, line


def test_workload_runs_transactions_with_capture(
    source: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["emulator", "workload", str(source), "--transactions", "20", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("done: ") and "transactions committed" in summary
    committed = int(summary.split()[1].replace(",", ""))
    rolled_back = int(summary.split(",")[1].split()[0])
    assert committed + rolled_back == 20
    assert "max LSN 0x" in summary and "capture lag 0.0 s" in summary
    with emulator.connect(source, autocommit=True) as conn:
        mapped = conn.execute("SELECT COUNT(*) FROM cdc.lsn_time_mapping").fetchone()[0]
    assert mapped >= 5 + committed  # the initial load and the workload were captured


def test_workload_without_capture(source: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with emulator.connect(source, autocommit=True) as conn:
        created = find_max_lsn(conn)
    assert created is not None
    capsys.readouterr()
    assert main(["emulator", "workload", str(source), "--transactions", "5", "--no-capture"]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"max LSN {created.hex}" in summary, summary  # nothing of the workload captured


@pytest.mark.parametrize("command", ["status", "workload", "agent"])
def test_missing_file_is_one_line_exit_2(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.db"
    assert main(["emulator", command, str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "no such file" in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert not missing.exists()


def test_not_an_emulator_database_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.db"
    other.write_text("not a database")
    assert main(["emulator", "status", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a cdc_assets emulator database" in err
    assert other.read_text() == "not a database"


@pytest.mark.parametrize(
    "argv",
    [
        ["emulator"],
        ["emulator", "workload", "x.db", "--seconds", "1", "--transactions", "2"],
        ["emulator", "workload", "x.db", "--tps", "0"],
        ["emulator", "create", "x.db", "--rows", "many"],
        ["nonsense"],
    ],
)
def test_bad_arguments_are_one_line_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cdc-assets: error: ")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emulator", "--help"]) == 0
    assert "workload" in capsys.readouterr().out
