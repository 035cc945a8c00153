"""A new user's first steps off the README's main road, each walked as the user would.

Right after cloning, ``dg check defs`` and ``dg list defs`` fail with one hint, to create the demo
source; following it (``cdc-assets emulator create``) gives a source as SQL Server is once its
capture job has scanned, so both then load every demo table and the example asset, with no
warning about the virtual environment (the README runs ``.venv/bin/dg`` without activating it).
A table CDC captures but the capture job has not scanned yet is left out with what depends on it,
not reported as another error; ``cdc-assets check`` with a setting that does not fit the source
fails with one line and records nothing. ``make bench QUICK=1`` installs nothing (what its scripts
import is the project's) and runs every script in ``benchmarks/``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cdc_assets import emulator
from cdc_assets.cli import main
from cdc_assets.dagster.code_location import STATE_DIR_ENV, load_definitions
from cdc_assets.dagster.examples import daily_orders_key
from cdc_assets.dagster.sync.names import change_log_key, mirror_key, sensor_name
from cdc_assets.workload import DEMO_TABLES, create_demo_database
from cdc_assets_tests.support.fresh_copy import fresh_copy

VENV_WARNING = "does not match the virtual environment"


def _run(command: list[str], clone: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CDC_ASSETS_CONFIG", "DAGSTER_HOME", "VIRTUAL_ENV"}
        and not k.startswith("PYTEST")
    }
    env["PYTHONPATH"] = str(clone)  # the copy's code, not the worktree's the .venv points at
    return subprocess.run(
        command, cwd=clone, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_dg_before_and_after_following_the_hint(tmp_path: Path) -> None:
    clone = fresh_copy(tmp_path / "clone")
    db = clone / ".demo" / "source.db"
    hint = None
    for command in ("check", "list"):
        result = _run([".venv/bin/dg", command, "defs"], clone)
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert f"The emulated source {db} does not exist." in output, output
        assert VENV_WARNING not in output, output
        found = re.search(r"or '(cdc-assets emulator create [^']+)'", output)
        assert found is not None, output
        hint = found.group(1)
    assert hint == f"cdc-assets emulator create {db}"

    created = _run([".venv/bin/" + hint.split()[0], *hint.split()[1:]], clone)
    assert created.returncode == 0, created.stdout + created.stderr

    checked = _run([".venv/bin/dg", "check", "defs"], clone)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0, output
    assert "All component YAML validated successfully." in checked.stdout, output
    assert "All definitions loaded successfully." in checked.stdout, output
    assert "left out" not in output and VENV_WARNING not in output, output

    listed = _run([".venv/bin/dg", "list", "defs", "--json"], clone)
    assert listed.returncode == 0, listed.stderr
    assert VENV_WARNING not in listed.stderr, listed.stderr
    found_defs = json.loads(listed.stdout)
    assets = {a["asset_key"] for a in found_defs["assets"]}
    for table in DEMO_TABLES:
        assert change_log_key("demo", table.schema, table.name).to_user_string() in assets
        assert mirror_key("demo", table.schema, table.name).to_user_string() in assets
    assert daily_orders_key("demo").to_user_string() in assets
    assert sensor_name("demo") in {s["name"] for s in found_defs["sensors"]}


def _demo_database(directory: Path, *, scanned: bool) -> Path:
    db = directory / "source.db"
    conn = emulator.connect(db, autocommit=True)
    try:
        create_demo_database(conn, seed=0, rows_per_table=5, polling_interval=None)
    finally:
        conn.close()
    if scanned:
        emulator.scan(db)
    return db


def _config(directory: Path, db: Path, **settings: object) -> Path:
    source = {"name": "shop", "connection": {"emulator": {"path": str(db)}}, **settings}
    config = {
        "sources": [source],
        "storage": {"base_path": str(directory / "storage")},
        "examples": ["daily_orders"],
    }
    path = directory / "cdc_assets.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_tables_not_yet_scanned_are_left_out_with_their_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A real SQL Server just after ``sp_cdc_enable_table``: the capture job has not scanned,
    so no capture instance is established. The tables are left out until the next reload, and
    so is the example built on ``dbo.orders``; once scanned, a reload shows them all."""
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "state"))
    config = _config(tmp_path, _demo_database(tmp_path, scanned=False))
    with caplog.at_level(logging.WARNING):
        defs, (source,), _ = load_definitions(config)
    assert source.tables == ()
    assert {f"{schema}.{name}" for schema, name in source.unscanned} == {
        t.full_name for t in DEMO_TABLES
    }
    assert not defs.resolve_asset_graph().has(daily_orders_key("shop"))
    assert "daily_orders is left out until the next reload, with dbo.orders of source 'shop'" in (
        caplog.text
    )

    emulator.scan(tmp_path / "source.db")
    defs, (source,), _ = load_definitions(config)
    assert len(source.tables) == len(DEMO_TABLES) and source.unscanned == ()
    assert defs.resolve_asset_graph().has(daily_orders_key("shop"))


def test_check_with_settings_that_do_not_fit_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cdc-assets check`` with a column rule naming no captured column: one line, exit 2,
    and no catalog recorded ("nothing written"); with the rule fixed, the check records it
    there. An example whose table no source captures is one line too."""
    state = tmp_path / "state"
    monkeypatch.setenv(STATE_DIR_ENV, str(state))
    db = _demo_database(tmp_path, scanned=True)
    rule = {"tables": "dbo.customers", "columns": ["emial"], "rule": "null"}
    config = _config(tmp_path, db, columns={"rules": [rule]})
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "source 'shop': columns.rules: " in err, err
    assert not state.exists()

    rule["columns"] = ["email"]
    config = _config(tmp_path, db, columns={"rules": [rule]})
    assert main(["check", str(config)]) == 0, capsys.readouterr().err
    assert (state / "shop.json").is_file()

    config = _config(tmp_path, db, tables={"include": ["dbo.customers"]})
    assert main(["check", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"cdc-assets: error: {config}: examples: daily_orders aggregates a captured table "
        "dbo.orders, and no source (shop) has one; remove it from 'examples' or capture "
        "dbo.orders\n"
    )


def test_make_bench_installs_nothing_and_its_scripts_import(tmp_path: Path) -> None:
    """``make bench`` pinned ``grpcio-status`` to the installed grpcio's version, which the
    index may not serve. pandas and pyspark[connect]'s packages are project dependencies, which
    pip resolved together at setup: the recipe runs the benchmarks and nothing else, and every
    script imports with the venv's packages (its Spark Connect probe finds them there)."""
    clone = fresh_copy(tmp_path / "clone")
    # (--no-print-directory: under `make test` a nested make says where it enters)
    dry = _run(["make", "--no-print-directory", "-n", "bench", "QUICK=1"], clone)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    scripts = [re.fullmatch(r"\.venv/bin/python benchmarks/(\w+)\.py .*", line) for line in lines]
    assert all(scripts), lines  # no pip install, no other step
    assert all(re.search(r" (--quick|--rows 20000)( |$)", line) for line in lines), lines
    ran = {m.group(1) for m in scripts if m is not None}
    # the soak runs alone (make soak-bench): longer than all of bench
    soak = _run(["make", "--no-print-directory", "-n", "soak-bench", "QUICK=1"], clone)
    assert soak.stdout.strip() == ".venv/bin/python benchmarks/soak.py --quick", soak.stdout
    mains = {p.stem for p in (clone / "benchmarks").glob("*.py") if "__main__" in p.read_text()}
    assert ran | {"soak"} == mains, ran  # every benchmark script
    probe = (
        "import importlib, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name)\n"
        "import freshness_probes\n"
        "assert freshness_probes.connect_deps(None) == '-', 'pyspark[connect] packages missing'\n"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe, *sorted(ran)],
        cwd=clone / "benchmarks",
        env={**os.environ, "PYTHONPATH": f"{clone / 'benchmarks'}{os.pathsep}{clone}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
