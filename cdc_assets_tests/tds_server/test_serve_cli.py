"""``cdc-assets emulator serve PATH``: a SQL Server client connects with what it prints; the
password only from the environment; Ctrl-C stops it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.cli import main
from cdc_assets.sqlserver import get_max_lsn
from cdc_assets.sqlserver.connection import connection_factory
from cdc_assets_tests.support.tds import PASSWORD, PASSWORD_ENV, USER, odbc_settings


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    assert main(["emulator", "create", str(path), "--rows", "5"]) == 0
    emulator.scan(path)
    return path


def test_serve_until_ctrl_c(source: Path) -> None:
    env = {**os.environ, PASSWORD_ENV: PASSWORD}
    command = [sys.executable, "-m", "cdc_assets.cli", "emulator", "serve", str(source)]
    command += ["--port", "0", "--user", USER, "--password-env", PASSWORD_ENV]
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        match = re.search(r"as database 'shop' on 127\.0\.0\.1:(\d+) over TDS", banner)
        assert match, banner
        assert PASSWORD not in banner
        settings = odbc_settings("odbc18", int(match.group(1)), database="shop")
        conn = connection_factory(settings).connect()
        try:
            assert get_max_lsn(conn).raw != bytes(10)
        finally:
            conn.close()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=20) in (0, 130)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_serve_without_the_password_is_one_line_exit_2(
    source: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CDC_EMULATOR_PASSWORD", raising=False)
    assert main(["emulator", "serve", str(source), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CDC_EMULATOR_PASSWORD" in err
