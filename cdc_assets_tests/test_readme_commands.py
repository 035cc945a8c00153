"""Every command README.md shows, run as written from the root of a fresh copy of the repository.

The commands are parsed from README.md's ```bash blocks, so the README and this test cannot
drift: a command this test does not know fails it. The copy holds the repository's files as
they are in the work tree (no ``.demo``, no build state) and a symlink to this ``.venv``, so
nothing is reinstalled; ``PYTHONPATH`` makes the copy's code the one that runs. Long-running
commands run briefly: ``make demo`` until its UI answers, then Ctrl-C (SIGINT); a workload's
``--seconds`` shortened. Only ``make test`` (this suite), the Docker Compose commands (no Docker
here; ``cdc_assets_tests/deploy`` checks those files) and ``make bench`` (tens of minutes) are
not run, each for the reason given below.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from cdc_assets_tests.support.fresh_copy import fresh_copy
from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@dataclass(frozen=True)
class How:
    """How a README command runs here: ``kind`` is run | ui | skip."""

    kind: str
    expect: str = ""  # a regular expression the output must match
    shorten: tuple[str, str] | None = None  # (text, replacement) in the command
    reason: str = ""
    timeout: float = 300


# Every command of README.md, in the order the README gives them.
COMMANDS: dict[str, How] = {
    "make demo": How("ui", expect=r"demo: Dagster UI at http://127\.0\.0\.1:\d+"),
    "make test": How("skip", reason="it is the suite this test belongs to"),
    "CDC_ASSETS_DB_PASSWORD='Any-Passw0rd' .venv/bin/cdc-assets emulator sql .demo/shop.db "
    "deploy/sqlserver/init.sql": How(
        "run", expect=r"init\.sql: database shop ready, CDC on dbo\.customers and dbo\.orders"
    ),
    ".venv/bin/cdc-assets demo --headless --seconds 30": How(
        "run",
        expect=r"verified 5 tables at LSN 0x[0-9A-F]{20}: equal\n\Z",
        shorten=("--seconds 30", "--seconds 4"),
    ),
    ".venv/bin/dg check defs": How(
        "run",
        expect=r"All component YAML validated successfully\.\n"
        r"All definitions loaded successfully\.",
    ),
    ".venv/bin/dbt build --project-dir cdc_assets/dbt_example --profiles-dir "
    "cdc_assets/dbt_example": How(
        "skip",
        reason="needs make demo's Spark Connect server; cdc_assets_tests/cluster/"
        "test_dbt_models.py builds the same project with the same profiles against one",
    ),
    "cp deploy/.env.example deploy/.env": How(
        "skip", reason="a step of the Docker Compose setup, which needs Docker (see below)"
    ),
    "docker compose -f deploy/docker-compose.yml up -d --build": How(
        "skip",
        reason="needs Docker and SQL Server images; cdc_assets_tests/deploy checks the files",
    ),
    ".venv/bin/cdc-assets emulator create .demo/try.db --seed 7": How(
        "run", expect=r"created \.demo/try\.db"
    ),
    ".venv/bin/cdc-assets emulator workload .demo/try.db --seconds 60": How(
        "run",
        expect=r"done: [\d,]+ transactions committed",
        shorten=("--seconds 60", "--seconds 3"),
    ),
    ".venv/bin/cdc-assets emulator status .demo/try.db": How(
        "run", expect=r"CDC enabled.*\n.*max LSN  0x"
    ),
    "make bench": How("skip", reason="runs for tens of minutes; the README says so"),
}


def readme_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks: each line without its trailing comment."""
    commands = []
    for block in re.findall(r"^ *```bash\n(.*?)^ *```", text, flags=re.S | re.M):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_every_readme_command_is_known() -> None:
    found = readme_commands(README.read_text(encoding="utf-8"))
    assert found == list(COMMANDS), (
        "README.md's commands changed: make COMMANDS in this test say how each one runs"
    )
    assert all(how.reason for how in COMMANDS.values() if how.kind == "skip")


def run_until_ui(command: str, clone: Path, env: dict[str, str], how: How) -> str:
    """Start ``command``, wait until the Dagster UI answers, then Ctrl-C it (SIGINT to its
    process group, as a terminal does); its output."""
    port = int(env["DEMO_PORT"])
    log = clone / "ui_command.out"
    with log.open("w") as out:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + how.timeout
        while time.monotonic() < deadline and process.poll() is None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).close()
                break
            except OSError:
                time.sleep(1)
        assert process.poll() is None, f"{command} ended early:\n{log.read_text()}"
        # The UI answers: the demo says so on its terminal within seconds (it polls too).
        said = time.monotonic() + 30
        while re.search(how.expect, log.read_text()) is None and time.monotonic() < said:
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = log.read_text()
    # make dies of the SIGINT itself once its recipe has ended (as in a terminal).
    assert status in (0, -signal.SIGINT), f"{command} exited {status}:\n{output}"
    return output


def test_readme_commands_run_from_a_fresh_copy(tmp_path: Path) -> None:
    clone = fresh_copy(tmp_path / "clone")
    env = {
        k: v
        for k, v in os.environ.items()
        # no VIRTUAL_ENV: the README runs .venv/bin/... without activating the .venv
        if k not in {"CDC_ASSETS_CONFIG", "DAGSTER_HOME", "VIRTUAL_ENV"}
        and not k.startswith("PYTEST")
    }
    env.update(
        PYTHONPATH=str(clone),
        DEMO_PORT=str(free_port()),
        DEMO_SPARK_PORT=str(free_port()),  # not 15002: a demo may run on this machine
        DEMO_TDS_PORT=str(free_port()),  # nor 14330
        PYSPARK_PYTHON=str(clone / ".venv/bin/python"),
        PYSPARK_DRIVER_PYTHON=str(clone / ".venv/bin/python"),
    )
    for command in readme_commands(README.read_text(encoding="utf-8")):
        how = COMMANDS[command]
        if how.kind == "skip":
            continue
        if how.shorten is not None:
            command = command.replace(*how.shorten)
        if how.kind == "ui":
            output = run_until_ui(command, clone, env, how)
            assert "demo: stopped; 'make demo' continues from here" in output, output
            assert "Traceback" not in output, output
            assert (clone / ".demo/logs/dagster.log").exists()
        else:
            result = subprocess.run(
                ["bash", "-c", command],
                cwd=clone,
                env=env,
                capture_output=True,
                text=True,
                timeout=how.timeout,
                check=False,
            )
            assert result.returncode == 0, f"{command}:\n{result.stdout}{result.stderr}"
            # dg's warning that the .venv is not the active one (pyproject.toml's tool.dg.cli)
            assert "does not match the virtual environment" not in result.stderr, result.stderr
            output = result.stdout  # what `expect` describes (Spark may add lines to stderr)
        assert re.search(how.expect, output), f"{command}: no match for {how.expect!r}:\n{output}"
