"""The production instance, ``deploy/dagster.yaml``, on a real PostgreSQL server.

A throwaway server (initdb into a temporary directory, ``pg_ctl start`` on a free port of
127.0.0.1) holds a database and a user with a password. The file is loaded as it is, from
``$DAGSTER_HOME``, with the ``DAGSTER_PG_*`` variables pointing at that server; then the project's
sensor → run → mirror cycle runs on it, and the run queue's per-source range limit is checked with
the daemon's own dequeue logic.

PostgreSQL comes from Debian's ``postgresql`` package, which ``make setup`` installs. Postgres
refuses to run as root, so as root the server runs as the package's ``postgres`` system user.
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import yaml
from dagster import DagsterEventType, DagsterInstance, DagsterRunStatus, QueuedRunCoordinator
from dagster._core.storage.dagster_run import RunsFilter
from dagster._core.test_utils import create_run_for_test, in_process_test_workspace
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from pyspark.sql import SparkSession

from cdc_assets.config import CONFIG_ENV
from cdc_assets.dagster.sync.names import (
    HOUSEKEEPING_TAG,
    RANGE_LANE_TAG,
    SOURCE_TAG,
    partitions_name,
    sync_job_name,
)
from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness, make_harness
from cdc_assets_tests.support.net import free_port

REPO = Path(__file__).resolve().parents[2]
DAGSTER_YAML = REPO / "deploy" / "dagster.yaml"
SERVER_USER = "postgres"  # the system user of Debian's postgresql package
MAKE_SETUP = "run `make setup` (it installs Debian's `postgresql` package)"


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server and the database Dagster gets (the password never printed)."""

    host: str
    port: int
    user: str
    db: str
    password: str = field(repr=False)

    def connect(self) -> Any:
        return psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.db
        )


def _postgres_bin() -> Path:
    """The directory of ``initdb``/``pg_ctl``: Debian keeps them outside PATH, newest first."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)] or [0],
    )
    if candidates:
        return candidates[-1].parent
    if (pg_ctl := shutil.which("pg_ctl")) is not None:
        return Path(pg_ctl).resolve().parent
    pytest.fail(f"PostgreSQL's initdb and pg_ctl were not found: {MAKE_SETUP}", pytrace=False)


def _server_user_prefix() -> list[str]:
    """Run the server's commands as ``postgres`` when we are root (Postgres refuses root)."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.fail(f"there is no '{SERVER_USER}' system user to run PostgreSQL: {MAKE_SETUP}")
    return ["runuser", "-u", SERVER_USER, "--"]


def _run(command: list[str], what: str, cwd: Path) -> None:
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    bin_dir = _postgres_bin()
    prefix = _server_user_prefix()
    # Under /tmp rather than pytest's tmp_path: the server user must reach it, and the socket
    # path must stay short (about 100 bytes at most).
    base = Path(tempfile.mkdtemp(prefix="cdc-pg-"))
    if prefix:
        account = pwd.getpwnam(SERVER_USER)
        os.chown(base, account.pw_uid, account.pw_gid)
    data, log = base / "data", base / "server.log"
    started = False
    try:
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-E", "UTF8"]
        settings = ["--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync"]
        _run([*prefix, *initdb, *settings], "initdb", cwd=base)  # a cwd the server user can enter
        for _attempt in range(3):  # another process may take the free port before we bind it
            port = free_port()
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base}"
                " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            )
            command = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log)]
            done = subprocess.run(
                [*command, "-o", options, "-w", "-t", "60", "start"],
                cwd=base,
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
            )
            if done.returncode == 0:
                started = True
                break
        if not started:
            text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            pytest.fail(f"pg_ctl start failed 3 times: {done.stdout}{done.stderr}\n{text}")

        server = PostgresServer(
            host="127.0.0.1",
            port=port,
            user="cdc_dagster",
            db="cdc_dagster",
            password=secrets.token_urlsafe(24),
        )
        # As the superuser over the server's socket (trusted); Dagster gets a password login.
        admin = psycopg2.connect(host=str(base), port=port, user="postgres", dbname="postgres")
        admin.autocommit = True  # CREATE DATABASE cannot run in a transaction
        with closing(admin), admin.cursor() as cursor:
            cursor.execute(f"CREATE ROLE {server.user} LOGIN PASSWORD %s", (server.password,))
            cursor.execute(f"CREATE DATABASE {server.db} OWNER {server.user}")
        yield server
    finally:
        if started:
            subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                cwd=base,
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_instance(
    postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DagsterInstance]:
    """``deploy/dagster.yaml``, unchanged, as ``$DAGSTER_HOME/dagster.yaml``."""
    home = tmp_path_factory.mktemp("dagster_home")
    shutil.copyfile(DAGSTER_YAML, home / "dagster.yaml")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAGSTER_HOME", str(home))
        env.setenv("DAGSTER_PG_HOST", postgres.host)
        env.setenv("DAGSTER_PG_PORT", str(postgres.port))
        env.setenv("DAGSTER_PG_USER", postgres.user)
        env.setenv("DAGSTER_PG_PASSWORD", postgres.password)
        env.setenv("DAGSTER_PG_DB", postgres.db)
        instance = DagsterInstance.get()
        try:
            yield instance
        finally:
            instance.dispose()


@pytest.fixture(scope="module")
def pg_harness(
    pg_instance: DagsterInstance, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> SyncHarness:
    return make_harness(tmp_path_factory.mktemp("source"), spark, pg_instance)


def _count(postgres: PostgresServer, sql: str, *params: Any) -> int:
    with closing(postgres.connect()) as conn, conn.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.fetchone()[0])


def test_the_file_reads_every_connection_setting_from_the_environment() -> None:
    config = yaml.safe_load(DAGSTER_YAML.read_text())
    db = config["storage"]["postgres"]["postgres_db"]
    assert db == {
        "hostname": {"env": "DAGSTER_PG_HOST"},
        "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"},
        "scheme": "postgresql+psycopg2",  # psycopg2 comes with dagster-postgres
    }


def test_the_instance_is_postgres_with_a_per_source_queue_and_run_monitoring(
    pg_instance: DagsterInstance, postgres: PostgresServer
) -> None:
    storages = {
        "run": type(pg_instance.run_storage).__name__,
        "event log": type(pg_instance.event_log_storage).__name__,
        "schedule": type(pg_instance.schedule_storage).__name__,
    }
    assert storages == {
        "run": "PostgresRunStorage",
        "event log": "PostgresEventLogStorage",
        "schedule": "PostgresScheduleStorage",
    }
    # The tables exist in our database, created by the instance on first use.
    assert _count(postgres, "SELECT count(*) FROM pg_tables WHERE tablename = 'runs'") == 1
    # The password is enforced: the instance can only have connected with the one from the env.
    with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
        PostgresServer(postgres.host, postgres.port, postgres.user, postgres.db, "wrong").connect()

    coordinator = pg_instance.run_coordinator
    assert isinstance(coordinator, QueuedRunCoordinator)
    queue = pg_instance.get_concurrency_config().run_queue_config
    assert queue is not None
    assert list(queue.tag_concurrency_limits) == [
        {"key": RANGE_LANE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 2},
        {"key": HOUSEKEEPING_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1},
    ]

    assert pg_instance.run_monitoring_enabled
    assert pg_instance.run_monitoring_max_resume_run_attempts == 0
    assert 0 < pg_instance.run_monitoring_start_timeout_seconds <= 600
    assert 0 < pg_instance.run_monitoring_poll_interval_seconds <= 120
    assert pg_instance.run_monitoring_max_runtime_seconds > 0


def test_sensor_runs_and_mirrors_on_postgres(
    pg_harness: SyncHarness, pg_instance: DagsterInstance, postgres: PostgresServer
) -> None:
    harness = pg_harness
    assert harness.sync() == 1  # the snapshot
    for _ in range(12):  # inserts, updates, deletes, key updates, rollbacks across the tables
        harness.workload.step()
    harness.capture()
    assert harness.sync() >= 1  # one or more LSN ranges
    harness.assert_mirrors_equal_source()

    runs = pg_instance.get_runs(RunsFilter(job_name=sync_job_name(SOURCE)))
    assert len(runs) == len(harness.results) >= 2
    assert {r.run_id for r in runs} == {r.run_id for r in harness.results}
    assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    assert all(r.tags.get(SOURCE_TAG) == SOURCE for r in runs)  # every run names its source

    # Straight from PostgreSQL: the runs, their events and the partitions the sensor added.
    run_ids = [r.run_id for r in runs]
    assert _count(postgres, "SELECT count(*) FROM runs WHERE run_id = ANY(%s)", run_ids) == len(
        runs
    )
    materializations = _count(
        postgres,
        "SELECT count(*) FROM event_logs WHERE run_id = ANY(%s) AND dagster_event_type = %s",
        run_ids,
        DagsterEventType.ASSET_MATERIALIZATION.value,
    )
    reported = sum(len(r.get_asset_materialization_events()) for r in harness.results)
    assert materializations == reported
    assert materializations >= 2 * len(harness.source.tables)  # the snapshot: change log, mirror
    partitions = _count(
        postgres,
        "SELECT count(*) FROM dynamic_partitions WHERE partitions_def_name = %s",
        partitions_name(SOURCE),
    )
    assert partitions == len(pg_instance.get_dynamic_partitions(partitions_name(SOURCE)))
    assert partitions == len(runs)  # the snapshot and one range per run


def test_the_queue_runs_two_range_runs_per_source_and_every_snapshot_run(
    pg_harness: SyncHarness,
    pg_instance: DagsterInstance,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Runs submitted as the UI and the daemon submit them: queued; the dequeuer picks two range
    runs per source (the one working and the next, whose steps wait for it) and every snapshot run
    beside them (without launching them: that needs the daemon and a code server)."""
    config = tmp_path_factory.mktemp("code_location") / "cdc_assets.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "sources": [
                    {"name": SOURCE, "connection": {"emulator": {"path": str(pg_harness.db)}}}
                ],
                "storage": {"base_path": str(config.parent / "storage")},
            }
        )
    )
    target = LoadableTargetOrigin(
        executable_path=sys.executable,
        module_name="cdc_assets.definitions",
        working_directory=str(REPO),
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv(CONFIG_ENV, str(config))
        with in_process_test_workspace(pg_instance, target) as workspace:
            (entry,) = workspace.get_code_location_entries().values()
            assert entry.code_location is not None, entry.load_error
            (repository,) = entry.code_location.get_repositories().values()
            job = repository.get_full_job(sync_job_name(SOURCE))
            assert job.run_tags.get(SOURCE_TAG) == SOURCE

            def submit(source: str, lane: bool = True) -> str:
                tags = {**job.run_tags, SOURCE_TAG: source}
                if lane:  # a range run, as the sensor requests it
                    tags[RANGE_LANE_TAG] = source
                run = create_run_for_test(
                    pg_instance,
                    job_name=job.name,
                    tags=tags,
                    remote_job_origin=job.get_remote_origin(),
                    job_code_origin=job.get_python_origin(),
                )
                return pg_instance.submit_run(run.run_id, workspace).run_id

            first, second, third = submit(SOURCE), submit(SOURCE), submit(SOURCE)
            snapshot, other = submit(SOURCE, lane=False), submit("other_source")
            submitted = (first, second, third, snapshot, other)

    try:
        statuses = {
            r.run_id: r.status for r in pg_instance.get_runs(RunsFilter(run_ids=list(submitted)))
        }
        assert statuses == dict.fromkeys(submitted, DagsterRunStatus.QUEUED)
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=5)
        chosen = daemon._get_runs_to_dequeue(
            pg_instance, pg_instance.get_concurrency_config(), fixed_iteration_time=None
        )
        picked = {r.run_id for r in chosen}
        assert picked == {first, second, snapshot, other}, "two range runs per source, not three"
    finally:
        for run_id in submitted:
            pg_instance.run_coordinator.cancel_run(run_id)
