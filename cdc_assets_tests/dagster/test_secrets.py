"""The source password never reaches Dagster: not the run or event storage, not the compute
logs, not the asset store, not a sensor skip reason, not a log record or the process output.

The project's real definitions are built for an ODBC (FreeTDS) source that points at a fake TDS
server (:mod:`cdc_assets_tests.support.fake_tds`) which refuses every login, with the password in
an environment variable. The sensor and a run of the sync job take the real connection path; the
fake server decodes the password from LOGIN7, so the search below provably covers a path on which
the password was in use, and the failures it searches say that the login failed.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    Definitions,
    ExecuteInProcessResult,
)
from dagster._core.definitions.sensor_definition import SensorExecutionData
from dagster._serdes import serialize_value
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.config import parse_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.demo.in_process import (
    apply_partition_requests,
    evaluate_sensor,
    execute_request,
)
from cdc_assets.dagster.sync import retry_waits
from cdc_assets.dagster.sync.names import SNAPSHOT_PARTITION, sync_job_name
from cdc_assets.dagster.sync.source import Source, select_tables
from cdc_assets.sqlserver import discover
from cdc_assets.workload import create_demo_database
from cdc_assets_tests.support.fake_tds import (
    FRAGMENT,
    PASSWORD_ENV,
    SECRET,
    USER,
    FakeTdsServer,
    has_freetds,
)

from .conftest import SOURCE

NEEDLES = [
    *(s.encode(codec) for s in (SECRET, FRAGMENT) for codec in ("utf-8", "utf-16-le")),
    # as LOGIN7 carries it (nibbles swapped, XOR 0xA5): a raw packet dump would show this
    bytes((((b << 4) | (b >> 4)) & 0xFF) ^ 0xA5 for b in SECRET.encode("utf-16-le")),
]


pytestmark = pytest.mark.skipif(
    not has_freetds(), reason="pyodbc or the FreeTDS ODBC driver is not installed"
)


def _odbc_source(tmp_path: Path, port: int) -> tuple[Source, Definitions]:
    """The real config and definitions of an ODBC source on ``port``; the captured tables are
    discovered from an emulated database (``load_source`` would have to log in)."""
    db = tmp_path / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    create_demo_database(conn, rows_per_table=5, polling_interval=None)
    emulator.scan(db)
    found = discover(conn)
    conn.close()
    odbc = {
        "server": "127.0.0.1",
        "port": port,
        "database": "shopdb",
        "user": USER,
        "password_env": PASSWORD_ENV,
        "driver": "FreeTDS",
        "encrypt": "no",
        "login_timeout": 5,
    }
    config = parse_config(
        {
            "sources": [{"name": SOURCE, "connection": {"odbc": odbc}}],
            "storage": {"base_path": str(tmp_path / "storage")},
            "spark": {"master": "local[2]"},
        },
        base_dir=tmp_path,
        origin="test config",
    )
    tables = tuple(select_tables(config.sources[0], found))
    assert tables
    source = Source(config.sources[0], tables, config.storage.base_path)
    return source, build_definitions(config, [source])


def _publish_snapshot_properties(spark: SparkSession, source: Source) -> None:
    """What a successful snapshot leaves for the sensor (properties only, no rows): with every
    table snapshotted, the next tick asks the source for its max LSN, i.e. logs in."""
    for table in source.tables:
        assert table.instance.start_lsn is not None
        lsn = table.instance.start_lsn.hex
        properties = {"kind": "snapshot", "mode": "exact", "replay_from": lsn, "snapshot_lsn": lsn}
        properties["capture_instance"] = table.instance.name
        source.store.write(
            spark,
            spark.createDataFrame([], "id int"),
            table.change_log_key.path,
            SNAPSHOT_PARTITION,
            lambda _, p=properties: p,
        )


def _step_failures(result: ExecuteInProcessResult) -> str:
    return "\n".join(
        str(e.step_failure_data.error)
        for e in result.all_events
        if e.event_type == DagsterEventType.STEP_FAILURE
    )


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in sorted(root.rglob("*")) if p.is_file()]


def test_password_reaches_no_dagster_storage(
    tmp_path: Path,
    spark: SparkSession,
    instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSWORD_ENV, SECRET)
    texts: dict[str, str] = {}
    with FakeTdsServer("login_failed") as server:
        source, defs = _odbc_source(tmp_path, server.port)

        def tick() -> SensorExecutionData:
            return evaluate_sensor(defs, instance, SOURCE)

        # 1. no snapshot yet: the tick requests the snapshot run without logging in
        data = tick()
        [request] = data.run_requests
        assert request.partition_key == SNAPSHOT_PARTITION and server.logins == []
        apply_partition_requests(instance, data)

        # 2. the snapshot run logs in, is refused, and fails with the login failure
        result = execute_request(defs.resolve_job_def(sync_job_name(SOURCE)), instance, request)
        assert not result.success
        texts["step failure"] = _step_failures(result)
        assert f"Login failed for user '{USER}'." in texts["step failure"], texts["step failure"]
        assert "password environment variable" in texts["step failure"]  # the hint
        assert len(server.logins) == 1

        # 3. once snapshots exist, the tick itself logs in (max LSN) and skips with the refusal
        # (without the pause the sensor keeps after a run that failed as a whole)
        _publish_snapshot_properties(spark, source)
        monkeypatch.setattr(retry_waits, "retry_pause", lambda _source: 0.0)
        skipped = tick()
        assert skipped.run_requests == []
        texts["sensor skip"] = skipped.skip_message or ""
        assert texts["sensor skip"].startswith(f"source '{SOURCE}' is unreachable: "), texts
        assert f"Login failed for user '{USER}'." in texts["sensor skip"], texts["sensor skip"]
        assert "password environment variable" in texts["sensor skip"]  # the hint
    assert server.failures == []
    # the password was really sent, both times, so it was in use on the paths searched below
    assert [(x.user_name, x.password) for x in server.logins] == [(USER, SECRET)] * 2

    runs = instance.get_runs()
    assert [r.run_id for r in runs] == [result.run_id]
    for run in runs:
        texts[f"run {run.run_id}"] = f"{run!r}\n{serialize_value(run)}"
        record = instance.get_run_record_by_id(run.run_id)
        texts[f"run record {run.run_id}"] = repr(record)
        entries = instance.all_logs(run.run_id)
        texts[f"events of {run.run_id}"] = "\n".join(
            f"{entry!r}\n{entry.dagster_event!r}\n{serialize_value(entry)}" for entry in entries
        )
    assert "Login failed for user" in texts[f"events of {result.run_id}"]
    texts["caplog"] = caplog.text + "\n".join(
        f"{r.getMessage()} {r.args!r} {r.exc_text}" for r in caplog.records
    )
    out, err = capfd.readouterr()
    texts["stdout"], texts["stderr"] = out, err

    for where, text in texts.items():
        for needle in (SECRET, FRAGMENT):
            assert needle not in text, f"the password leaked into {where}"

    root = Path(instance.root_directory)
    files = _files(root, tmp_path)
    assert any(p.suffix == ".db" and root in p.parents for p in files)  # run/event storage
    assert any(p.parent.name == "_delta_log" for p in files)  # the asset store
    found_login_failure = False
    for path in files:
        content = path.read_bytes()
        found_login_failure |= b"Login failed for user" in content
        for needle in NEEDLES:
            assert needle not in content, f"the password leaked into {path}"
    assert found_login_failure, "no stored file holds the failure: the file search found nothing"
