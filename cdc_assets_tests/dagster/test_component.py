"""``cdc_assets.SqlServerCdcSource`` as a Dagster user meets it.

- A new ``dg`` project in a temporary folder with this package installed into its own virtual
  environment: ``dg list components`` lists the component, ``dg scaffold defs`` writes a commented
  ``defs.yaml``, edited for an emulated source ``dg check defs`` passes and ``dg list defs`` lists
  every table's assets, the sync job and sensor; a misspelt setting fails ``dg check yaml`` naming
  it, and the load (``dg list defs``) with the project's own one line ("did you mean").
- A project of two sources where one stops answering: the project loads (its assets from the
  recorded catalog), the other source syncs a range, the silent one's sensor skips saying it is
  unreachable and its ``capture_health`` fails saying so.

The new project's virtual environment links the packages of this ``.venv`` except cdc_assets
(created in well under a second) and installs cdc_assets into it as the README says: the wheel
``make wheel`` builds in a fresh copy of the repository (``pip install --no-deps``: the other
packages are linked).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from dagster import AssetCheckKey, AssetKey, AssetSelection, DagsterInstance, materialize
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.dagster.demo.in_process import QUIET_RUN_CONFIG, execute_request, tick_sensor
from cdc_assets.dagster.sync.names import change_log_key, mirror_key, sensor_name, source_table_key
from cdc_assets.lsn import LsnRange
from cdc_assets.workload import create_demo_database, small_tables
from cdc_assets_tests.dagster.conftest import assert_succeeded
from cdc_assets_tests.support.fresh_copy import fresh_copy

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
SITE = (
    Path(sys.executable).parent.parent
    / "lib"
    / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    / "site-packages"
)
DG = Path(sys.executable).parent / "dg"
TABLES = small_tables(2)


def _source(db: Path, *, rows: int = 5) -> Path:
    conn = emulator.connect(str(db), autocommit=True)
    try:
        create_demo_database(
            conn, seed=0, rows_per_table=rows, tables=TABLES, polling_interval=None
        )
    finally:
        conn.close()
    while emulator.scan(db) > 0:  # capture instances established, as the capture job does
        pass
    return db


def _project(root: Path, module: str) -> Path:
    """A dg project as ``create-dagster project`` lays one out: pyproject.toml with [tool.dg],
    ``<module>/definitions.py`` loading ``<module>/defs``."""
    (root / module / "defs").mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
            [project]
            name = "{module}"
            version = "0.1.0"
            requires-python = ">=3.11"
            dependencies = ["cdc-assets"]

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "{module}"
            """),
        encoding="utf-8",
    )
    (root / module / "__init__.py").write_text("", encoding="utf-8")
    (root / module / "defs" / "__init__.py").write_text("", encoding="utf-8")
    (root / module / "definitions.py").write_text(
        textwrap.dedent("""\
            from pathlib import Path

            import dagster as dg


            @dg.definitions
            def defs() -> dg.Definitions:
                return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
            """),
        encoding="utf-8",
    )
    return root


def _wheel(directory: Path) -> Path:
    """The wheel ``make wheel`` builds in a fresh copy of the repository (README)."""
    checkout = fresh_copy(directory / "cdc_assets")
    built = subprocess.run(["make", "wheel"], cwd=checkout, capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (checkout / "dist").glob("cdc_assets-*-py3-none-any.whl")
    return wheel


def _venv(root: Path, wheel: Path) -> Path:
    """``root/.venv``: this .venv's packages but cdc_assets, then ``wheel`` installed, as the
    README says (``pip install <that file>``; ``--no-deps``: the others are linked)."""
    subprocess.run(
        [sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(root / ".venv")],
        check=True,
    )
    site = next((root / ".venv" / "lib").glob("python*/site-packages"))
    for entry in SITE.iterdir():
        if "cdc_assets" in entry.name or entry.name.startswith("__editable__"):
            continue
        (site / entry.name).symlink_to(entry)
    python = root / ".venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    absent = subprocess.run(
        [python, "-c", "import cdc_assets"], cwd=root, env=env, capture_output=True
    )
    assert absent.returncode == 1, "cdc_assets is importable before it was installed"
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            str(wheel),
        ],
        cwd=root,
        env=env,
        check=True,
    )
    where = subprocess.run(
        [python, "-c", "import cdc_assets; print(cdc_assets.__file__)"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(site)), where.stdout  # the wheel's copy, not a checkout
    return python


def _dg(root: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CDC_ASSETS_CONFIG", "DAGSTER_HOME", "PYTHONPATH"}
    }
    env.update(
        VIRTUAL_ENV=str(root / ".venv"), DAGSTER_HOME=str(root / "dagster_home"), NO_COLOR="1"
    )
    env["PATH"] = f"{root / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [str(DG), *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_scaffold_check_and_list_in_a_new_dg_project(tmp_path: Path) -> None:
    root = _project(tmp_path / "shop_platform", "shop_platform")
    python = _venv(root, _wheel(tmp_path))
    (root / "dagster_home").mkdir()
    (root / "dagster_home" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    db = _source(tmp_path / "shop.db")

    listed = _dg(root, "list", "components", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "cdc_assets.SqlServerCdcSource" in {c["key"] for c in json.loads(listed.stdout)["items"]}

    scaffolded = _dg(root, "scaffold", "defs", "cdc_assets.SqlServerCdcSource", "shop")
    assert scaffolded.returncode == 0, scaffolded.stdout + scaffolded.stderr
    defs_yaml = root / "shop_platform" / "defs" / "shop" / "defs.yaml"
    text = defs_yaml.read_text()
    assert text.startswith("type: cdc_assets.SqlServerCdcSource\n"), text
    assert "  name: shop " in text and "password_env" in text and "# " in text, text
    document = yaml.safe_load(text)
    assert document["attributes"]["connection"]["odbc"]["server"] == "sql1.example.com"

    # the user points it at an emulated source
    document["attributes"]["connection"] = {"emulator": {"path": str(db)}}
    document["attributes"]["storage"] = {"base_path": "data/cdc"}  # relative to the project
    defs_yaml.write_text(yaml.safe_dump(document, sort_keys=False))

    checked = _dg(root, "check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully." in checked.stdout, checked.stdout

    listed_defs = _dg(root, "list", "defs", "--json")
    assert listed_defs.returncode == 0, listed_defs.stderr
    found = json.loads(listed_defs.stdout)
    keys = {a["asset_key"] for a in found["assets"]}
    expected = {
        key.to_user_string()
        for t in TABLES
        for key in (
            source_table_key("shop", t.schema, t.name),
            change_log_key("shop", t.schema, t.name),
            mirror_key("shop", t.schema, t.name),
        )
    }
    assert keys == expected, keys
    assert {s["name"] for s in found["sensors"]} == {"shop_sync_sensor"}
    assert {"shop_sync", "shop_health", "shop_maintenance"} <= {j["name"] for j in found["jobs"]}
    checks = {c["key"] for c in found["asset_checks"]}
    assert (
        f"{change_log_key('shop', 'dbo', TABLES[0].name).to_user_string()}:capture_health" in checks
    )
    # the recorded catalog, kept as the component's defs state
    state = next((root / "shop_platform" / "defs" / ".local_defs_state").glob("*/state"))
    assert {t["name"] for t in json.loads(state.read_text())["tables"]} == {t.name for t in TABLES}
    assert python.exists()

    # a misspelt setting: dg check yaml names it (its JSON schema is the component's model)...
    document["attributes"]["sync"] = {"sensor_intervall_seconds": 5}
    defs_yaml.write_text(yaml.safe_dump(document, sort_keys=False))
    bad = _dg(root, "check", "yaml")
    assert bad.returncode == 1, bad.stdout
    assert re.search(
        r"defs\.yaml:\d+ - cdc_assets\.SqlServerCdcSource "
        r"attributes\.sync\.sensor_intervall_seconds "
        r"Additional properties are not allowed \('sensor_intervall_seconds' was unexpected\)",
        bad.stdout,
    ), bad.stdout
    # ... and loading the definitions says it in the project's one line
    loaded = _dg(root, "list", "defs")
    line = (
        f"{defs_yaml} is not a valid cdc_assets configuration: source 'shop': "
        "sync.sensor_intervall_seconds: unknown setting; did you mean 'sensor_interval_seconds'?"
    )
    assert loaded.returncode != 0
    assert line in loaded.stdout + loaded.stderr, loaded.stdout + loaded.stderr


# -- two sources, one silent -------------------------------------------------------------------


def _write_component(root: Path, module: str, name: str, db: Path, storage: Path) -> None:
    folder = root / module / "defs" / name
    folder.mkdir(parents=True)
    attributes = {
        "name": name,
        "connection": {"emulator": {"path": str(db)}},
        "storage": {"base_path": str(storage)},
        "spark": {"master": "local[2]"},
    }
    document = {"type": "cdc_assets.SqlServerCdcSource", "attributes": attributes}
    (folder / "defs.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.fixture
def two_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    module = f"two_sources_{tmp_path.name.replace('-', '_').lower()}"
    root = _project(tmp_path / "platform", module)
    for name in ("north", "south"):
        _write_component(root, module, name, _source(tmp_path / f"{name}.db"), tmp_path / "storage")
    monkeypatch.syspath_prepend(str(root))
    yield root, module
    for loaded in [m for m in sys.modules if m == module or m.startswith(f"{module}.")]:
        del sys.modules[loaded]


def _load(root: Path, module: str):
    import dagster as dg

    return dg.load_from_defs_folder(path_within_project=root / module)


def _snapshot_and_first_range(
    defs, instance: DagsterInstance, source: str, *, ranges: int
) -> list[str]:
    partitions = []
    cursor = None
    for _ in range(1 + ranges):
        data = tick_sensor(defs, instance, source, cursor)
        cursor = data.cursor
        assert len(data.run_requests) == 1, data.skip_message
        request = data.run_requests[0]
        result = execute_request(defs.resolve_job_def(f"{source}_sync"), instance, request)
        assert_succeeded(result)
        partitions.append(request.partition_key)
    return partitions


def test_a_silent_source_keeps_its_assets_and_the_other_syncs(
    two_sources: tuple[Path, str], spark: SparkSession, instance: DagsterInstance, tmp_path: Path
) -> None:
    root, module = two_sources
    defs = _load(root, module)  # both answer: their catalogs are recorded
    assert _snapshot_and_first_range(defs, instance, "south", ranges=0) == ["snapshot"]
    assert _snapshot_and_first_range(defs, instance, "north", ranges=0) == ["snapshot"]

    south_db = tmp_path / "south.db"
    south_db.rename(tmp_path / "south.db.away")  # south stops answering
    defs = _load(root, module)  # the location loads all the same

    graph = defs.resolve_asset_graph()
    keys = set(graph.get_all_asset_keys())
    for source in ("north", "south"):
        for t in TABLES:
            assert {
                source_table_key(source, t.schema, t.name),
                change_log_key(source, t.schema, t.name),
                mirror_key(source, t.schema, t.name),
            } <= keys, source
        assert defs.resolve_sensor_def(sensor_name(source)).name == f"{source}_sync_sensor"

    # north syncs: a change, its range, the mirrors equal to the source
    conn = emulator.connect(str(tmp_path / "north.db"), autocommit=True)
    try:
        conn.execute(f"UPDATE [dbo].[{TABLES[0].name}] SET qty = qty + 1000 WHERE id = 1")
    finally:
        conn.close()
    while emulator.scan(tmp_path / "north.db") > 0:
        pass
    data = tick_sensor(defs, instance, "north")
    assert len(data.run_requests) == 1, data.skip_message
    request = data.run_requests[0]
    LsnRange.parse_key(request.partition_key or "")  # a range, not the snapshot
    assert_succeeded(execute_request(defs.resolve_job_def("north_sync"), instance, request))
    mirror = spark.read.format("delta").load(
        str(tmp_path / "storage" / Path(*mirror_key("north", "dbo", TABLES[0].name).path))
    )
    assert mirror.where("id = 1").first()["qty"] >= 1000

    # south: its sensor skips saying why, its capture_health fails saying so
    skipped = tick_sensor(defs, instance, "south")
    assert not skipped.run_requests
    assert skipped.skip_message is not None
    assert skipped.skip_message.startswith("source 'south' is unreachable: The emulated source "), (
        skipped.skip_message
    )
    assert "the sync resumes where the chain ends once the source answers" in skipped.skip_message

    check_keys = [
        AssetCheckKey(change_log_key("south", "dbo", t.name), "capture_health") for t in TABLES
    ]
    result = materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],
        instance=instance,
        resources=dict(defs.resources or {}),
        run_config=QUIET_RUN_CONFIG,
        selection=AssetSelection.checks(*check_keys),
        raise_on_error=False,
    )
    evaluations = {e.asset_check_key: e for e in result.get_asset_check_evaluations()}
    assert set(evaluations) == set(check_keys)
    for evaluation in evaluations.values():
        assert not evaluation.passed
        assert evaluation.description.startswith("The source is unreachable"), (
            evaluation.description
        )

    # when south answers again, the next load asks it, and its sensor reads it again
    (tmp_path / "south.db.away").rename(south_db)
    defs = _load(root, module)
    assert AssetKey(list(mirror_key("south", "dbo", TABLES[0].name).path)) in set(
        defs.resolve_asset_graph().get_all_asset_keys()
    )
    resumed = tick_sensor(defs, instance, "south")  # it asked the source: nothing new there
    assert (resumed.skip_message or "").startswith("max LSN 0x"), resumed.skip_message


def test_a_source_never_recorded_must_answer(two_sources: tuple[Path, str], tmp_path: Path) -> None:
    """Nothing recorded and no answer: the load fails, with the component named by Dagster and
    the cause in one line of ours."""
    root, module = two_sources
    (tmp_path / "south.db").rename(tmp_path / "south.db.away")
    with pytest.raises(Exception) as raised:
        _load(root, module)
    messages = []
    error: BaseException | None = raised.value
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    assert "south" in messages[0] and "defs.yaml (SqlServerCdcSource) (error)" in messages[0]
    assert re.fullmatch(
        r"source 'south': The emulated source .*south\.db does not exist\. Hint: .* \(the source "
        r"has not answered since it was configured: it must answer once so that its captured "
        r"tables are recorded\)",
        messages[-1],
    ), messages
