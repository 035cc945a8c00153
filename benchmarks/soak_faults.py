"""The faults the soak benchmark injects on its schedule (see :mod:`soak`), each as a person or
the machine would cause it, each returning what it did (one line, and facts for the JSON):

- **a column added** to ``dbo.orders`` as a DBA does it: ``ALTER TABLE ... ADD``, a backfill of
  some rows, then ``sys.sp_cdc_enable_table`` with a second capture instance, sent to the
  emulated SQL Server (the source file, as the workload writes it);
- **a column rule changed**: the config file edited (``soak_setup.change_rule``), then the code
  location reloaded through the webserver's GraphQL ``reloadRepositoryLocation`` (what the UI's
  *Reload* button sends) and awaited until it is loaded again;
- **a run worker killed** (``SIGKILL``) while it runs a sync run: the process whose pid the
  warm launcher put in the run's tags;
- **the TDS server stopped** and started again on the same port (``soak.py`` does both ends).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from cdc_assets import emulator
from cdc_assets.dagster.warm_launcher import PID_TAG
from cdc_assets.sqlserver import cdc_admin
from cdc_assets_tests.support.dagster_dev import DagsterDev

ADDED_TABLE = ("dbo", "orders")
ADDED_COLUMN = "soak_note"
ADDED_INSTANCE = "dbo_orders_v2"
LOCATION = "cdc_assets"  # workspace.yaml's location_name

# What the soak asks of a code location entry (the reload's answer, the status after it).
ENTRY = """
    ... on WorkspaceLocationEntry {
      loadStatus
      locationOrLoadError { __typename ... on PythonError { message } }
    }"""
RELOAD = (
    "mutation ($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) {"
    f"  __typename {ENTRY}"
    "  ... on ReloadNotSupported { message } ... on RepositoryLocationNotFound { message }"
    "  ... on UnauthorizedError { message } ... on PythonError { message } } }"
)
LOCATION_STATUS = (
    "query ($name: String!) { workspaceLocationEntryOrError(name: $name) {"
    f"  __typename {ENTRY} }} }}"
)


def add_column(db: Path) -> dict[str, Any]:
    """``ALTER TABLE [dbo].[orders] ADD ...``, a backfill, and the second capture instance."""
    schema, name = ADDED_TABLE
    conn = emulator.connect(db, autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute(f"ALTER TABLE [{schema}].[{name}] ADD [{ADDED_COLUMN}] nvarchar(40) NULL")
        cursor.execute(
            f"UPDATE [{schema}].[{name}] SET [{ADDED_COLUMN}] = N'backfilled' "
            "WHERE [order_id] % 10 = 0"
        )
        cdc_admin.enable_table(
            conn, schema, name, capture_instance=ADDED_INSTANCE, supports_net_changes=True
        )
    finally:
        conn.close()
    return {
        "line": f"column [{ADDED_COLUMN}] added to [{schema}].[{name}], a tenth of its rows "
        f"backfilled, capture instance {ADDED_INSTANCE} enabled",
    }


def reload_location(dev: DagsterDev, timeout: float = 300) -> dict[str, Any]:
    """Reload the code location through GraphQL and wait until it is loaded again."""
    began = time.monotonic()
    answer = dev.graphql(RELOAD, {"name": LOCATION})["reloadRepositoryLocation"]
    if answer["__typename"] != "WorkspaceLocationEntry":
        return {"line": f"reload refused: {answer.get('message')}", "ok": False}
    while time.monotonic() - began < timeout:
        entry = dev.graphql(LOCATION_STATUS, {"name": LOCATION})["workspaceLocationEntryOrError"]
        error = entry.get("locationOrLoadError") or {}
        if entry.get("loadStatus") == "LOADED":
            seconds = time.monotonic() - began
            if error.get("__typename") == "PythonError":
                message = " ".join(str(error.get("message")).split())[:300]
                return {"line": f"reloaded with an error: {message}", "ok": False}
            return {"line": f"code location reloaded in {seconds:.1f} s", "ok": True}
        time.sleep(0.5)
    return {"line": f"code location not loaded {timeout:.0f} s after the reload", "ok": False}


def running_sync_run(home: Path, job: str) -> tuple[str, int, str] | None:
    """(run id, run worker pid, partition) of a sync run in flight in a live run worker."""
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    with DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs(
            filters=RunsFilter(job_name=job, statuses=[DagsterRunStatus.STARTED]), limit=10
        )
    for run in runs:
        pid = run.tags.get(PID_TAG)
        if pid is None or not pid.isdigit():
            continue
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"cdc_assets.dagster.run_worker" in command:
            return run.run_id, int(pid), run.tags.get("dagster/partition", "?")
    return None


def kill_worker(home: Path, job: str) -> dict[str, Any] | None:
    """SIGKILL to the run worker of a sync run in flight; None when no run is in flight now."""
    found = running_sync_run(home, job)
    if found is None:
        return None
    run_id, pid, partition = found
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return {
        "line": f"run worker {pid} killed (SIGKILL) in run {run_id[:8]} (partition {partition})",
        "run_id": run_id,
        "pid": pid,
    }
