"""The code location ``workspace.yaml`` (and ``dg``) names, configured the earlier way: it loads a
config file (``CDC_ASSETS_CONFIG``) under ``dg check defs``, a bad config fails it naming the
field, a source that has never answered fails it saying it must answer once, and the definitions
hold per demo table the source, change-log and mirror assets, the change-log checks, the sync job
and its sensor (running by default)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DefaultSensorStatus

from cdc_assets import emulator
from cdc_assets.config import load_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.sync.names import (
    change_log_key,
    key_part,
    mirror_key,
    sensor_name,
    source_table_key,
    sync_job_name,
)
from cdc_assets.workload import DEMO_TABLES, create_demo_database

ROOT = Path(__file__).resolve().parents[2]
DAGSTER = Path(sys.executable).parent / "dagster"
DG = Path(sys.executable).parent / "dg"
SOURCE = "demo"


def _demo_source(directory: Path) -> Path:
    db = directory / "source.db"
    conn = emulator.connect(db, autocommit=True)
    try:
        create_demo_database(conn, seed=0, rows_per_table=20, polling_interval=None)
    finally:
        conn.close()
    emulator.scan(db)  # establish the capture instances, as the capture job does
    return db


def _write_config(directory: Path, db: Path, *, snapshot_mode: str = "auto") -> Path:
    config = {
        "sources": [
            {
                "name": SOURCE,
                "connection": {"emulator": {"path": str(db)}},
                "snapshot": {"mode": snapshot_mode},
            }
        ],
        "storage": {"base_path": str(directory / "storage")},
        "spark": {"master": "local[1]"},
    }
    path = directory / f"cdc_assets_{snapshot_mode}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("code_location")
    return _write_config(directory, _demo_source(directory))


def _validate(config: Path, dagster_home: Path) -> subprocess.CompletedProcess[str]:
    dagster_home.mkdir(exist_ok=True)
    (dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    env = dict(
        os.environ,
        CDC_ASSETS_CONFIG=str(config),
        DAGSTER_HOME=str(dagster_home),
        VIRTUAL_ENV=str(ROOT / ".venv"),
    )
    return subprocess.run(
        [str(DG), "check", "defs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_validate_loads_the_code_location(demo_config: Path, tmp_path: Path) -> None:
    result = _validate(demo_config, tmp_path / "dagster_home")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # Every demo table made it into the location (none left out for want of a capture scan).
    assert "no established capture instance" not in output, output


def test_validate_names_the_bad_field(demo_config: Path, tmp_path: Path) -> None:
    bad = _write_config(tmp_path, demo_config.parent / "source.db", snapshot_mode="fast")
    result = _validate(bad, tmp_path / "dagster_home")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "source 'demo': snapshot.mode" in output, output


def test_load_errors_are_one_line_from_the_ui_and_the_cli(tmp_path: Path) -> None:
    """A misspelt setting and a missing emulated source: the code location's load error and
    ``cdc-assets check`` show the same one line, and loading creates no database."""
    missing = tmp_path / "gone" / "source.db"
    missing.parent.mkdir()
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "sources:\n  - name: shop\n    connection: {emulator: {path: gone/source.db}}\n"
        "    sync: {sensor_intervall_seconds: 5}\nstorage: {base_path: st}\n",
        encoding="utf-8",
    )
    absent = tmp_path / "absent.yaml"
    absent.write_text(typo.read_text().replace("    sync: {sensor_intervall_seconds: 5}\n", ""))
    expected = {
        typo: f"{typo} is not a valid cdc_assets configuration: source 'shop': "
        "sync.sensor_intervall_seconds: unknown setting; did you mean 'sensor_interval_seconds'?",
        absent: f"{absent}: source 'shop': The emulated source {missing} does not exist. Hint: "
        f"Create it with 'make demo' (the demo's .demo/source.db) or "
        f"'cdc-assets emulator create {missing}'. (the source has not answered since it was "
        "configured: it must answer once so that its captured tables are recorded)",
    }
    for config, line in expected.items():
        result = _validate(config, tmp_path / "dagster_home")
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        assert f"CodeLocationError: {line}\n" in output, output
        assert "sqlite3" not in output, output
        cli = subprocess.run(
            [str(DAGSTER.parent / "cdc-assets"), "check", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert (cli.returncode, cli.stdout, cli.stderr) == (2, "", f"cdc-assets: error: {line}\n")
    assert not missing.exists()


def test_check_command_lists_the_tables(demo_config: Path) -> None:
    cli = subprocess.run(
        [str(DAGSTER.parent / "cdc-assets"), "check", str(demo_config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(f"{demo_config}: ok; source 'demo': 5 tables (dbo.customers"), (
        cli.stdout
    )


def test_definitions_per_demo_table(demo_config: Path) -> None:
    defs = build_definitions(load_config(demo_config))
    graph = defs.resolve_asset_graph()
    tables = [(t.schema, t.name) for t in DEMO_TABLES]

    expected = {
        key
        for schema, name in tables
        for key in (
            source_table_key(SOURCE, schema, name),
            change_log_key(SOURCE, schema, name),
            mirror_key(SOURCE, schema, name),
        )
    }
    assert set(graph.get_all_asset_keys()) == expected
    # "order lines" is not a valid key part: it becomes order_lines_<short hash>.
    assert re.fullmatch(r"order_lines_[0-9a-f]{6}", key_part("order lines"))
    assert AssetKey(["cdc", SOURCE, "dbo", f"{key_part('order lines')}_changes"]) in expected
    # The three stages of a table read differently by their last key part (the box title in
    # the lineage graph, the name in the catalog).
    assert AssetKey(["mirror", SOURCE, "dbo", "orders_mirror"]) in expected
    titles = [k.path[-1] for k in expected if k.path[-1].startswith("orders")]
    assert sorted(titles) == ["orders", "orders_changes", "orders_mirror"], titles
    assert AssetKey(["sqlserver", SOURCE, "dbo", "customers"]) in expected

    for schema, name in tables:
        key = change_log_key(SOURCE, schema, name)
        checks = {c.name for c in graph.asset_check_keys if c.asset_key == key}
        assert checks == {"coverage", "chain", "capture_health"}, key.to_user_string()
        mirror = mirror_key(SOURCE, schema, name)
        checks = {c.name for c in graph.asset_check_keys if c.asset_key == mirror}
        assert checks == {"at_chain_end", "reconcile"}, mirror.to_user_string()

    job = defs.resolve_job_def(sync_job_name(SOURCE))
    # The sync job runs the change logs (with their blocking checks), the mirrors (which report
    # at_chain_end themselves; its step stays for "Execute checks") and capture_health; reconcile
    # runs in the scheduled health job.
    assert {n.name for n in job.graph.nodes} == {
        f"{SOURCE}_change_logs",
        f"{SOURCE}_mirrors",
        f"{SOURCE}_mirror_checks",
        f"{SOURCE}_capture_health",
    }
    in_sync = {(k.asset_key.path[0], k.name) for k in job.asset_layer.asset_graph.asset_check_keys}
    assert ("mirror", "reconcile") not in in_sync
    assert {("mirror", "at_chain_end"), ("cdc", "capture_health")} <= in_sync
    assert job.name == "demo_sync"
    sensor = defs.resolve_sensor_def(sensor_name(SOURCE))
    assert sensor.name == "demo_sync_sensor"
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.job_name == "demo_sync"
