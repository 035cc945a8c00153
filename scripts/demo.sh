#!/usr/bin/env bash
# `make demo` (after `make setup`): continuous CDC sync of the embedded demo source in the Dagster UI.
#
# 1. Creates the emulated SQL Server source .demo/source.db when it is missing (or unreadable) —
#    a new source also clears the previous sync state (.demo/storage, .demo/dagster_home) — or
#    reuses it, and runs the capture job until the change tables hold everything committed, so the
#    code location finds every capture instance.
# 2. Serves the source over TDS on 127.0.0.1:DEMO_TDS_PORT (`cdc-assets emulator serve`): the code
#    location connects to it as to a real SQL Server (`odbc:` with Microsoft ODBC Driver 18, in
#    .demo/cdc_assets.yaml, written from the demo's component instance cdc_assets/defs/demo/defs.yaml).
#    Starts the workload generator with the capture agent (status lines in .demo/logs/workload.log).
# 3. Starts a Spark Connect server (spark.remote in the demo's defs.yaml) that every run attaches to,
#    so a run does not start a Spark driver of its own (log in .demo/logs/spark-connect.log).
# 4. Runs `dagster dev -w workspace.yaml` with the persistent instance DAGSTER_HOME=.demo/dagster_home
#    (its dagster.yaml is written once) and prints the UI address; the sensor demo_sync_sensor runs
#    by default and keeps the change logs and mirrors in sync.
# Steps 2-4 are cdc_assets/demo_processes.py, which this script becomes: whatever ends the demo
# (Ctrl-C, SIGTERM, the terminal closed, its output pipe closed, make killed, one of its processes
# dying), it stops Dagster and its runs, then Spark, then the TDS server and the workload, one line
# each, and leaves no process behind. A second `make demo` while one runs here says so and stops.
# Safe to run twice: the source, the stored assets and the run history are kept, and the sync
# continues where the chain ends (a run cut off by an abrupt stop is marked failed and retried).
# The terminal shows one line per run and Dagster's warnings and errors; Dagster's and Spark's full
# log goes to .demo/logs/dagster.log. Disk stays bounded: the workload keeps every table near
# DEMO_MAX_ROWS rows, the emulated CDC cleanup job keeps DEMO_RETENTION_MINUTES of changes, and
# the job demo_maintenance (every 10 minutes, defs.yaml) VACUUMs the Delta tables, drops
# retired ranges' change rows and deletes old runs.
# Settings: DEMO_TPS (transactions per second, default 20), DEMO_ROWS (initial rows per table,
# default 1000), DEMO_MAX_ROWS (default 3000), DEMO_RETENTION_MINUTES (default 10), DEMO_SEED
# (default 0), DEMO_HOST (default 127.0.0.1), DEMO_PORT (default 3000), DEMO_SPARK_PORT (the Spark
# Connect server's; default: spark.remote's in the demo's defs.yaml, 15002), DEMO_TDS_PORT (the TDS
# server's, default 14330), CDC_DEMO_SOURCE_PASSWORD (login cdc_reader's; default Demo-Passw0rd).
set -euo pipefail
# Started in the background without job control (`make demo &`, a supervisor), this script and
# everything it starts would ignore SIGINT; run it again with the default handlers, once.
if [ -z "${DEMO_SIGNALS_RESET:-}" ] && env --default-signal=INT true 2>/dev/null; then
  export DEMO_SIGNALS_RESET=1
  exec env --default-signal=INT,TERM bash "$0" "$@"
fi
cd "$(dirname "$0")/.."
ROOT="$PWD"

CLI=.venv/bin/cdc-assets
PY=.venv/bin/python
DAGSTER=.venv/bin/dagster
SOURCE=.demo/source.db
STORAGE=.demo/storage
LOG_DIR=.demo/logs
TPS="${DEMO_TPS:-20}"
ROWS="${DEMO_ROWS:-1000}"
MAX_ROWS="${DEMO_MAX_ROWS:-3000}"
RETENTION_MINUTES="${DEMO_RETENTION_MINUTES:-10}"
SEED="${DEMO_SEED:-0}"
HOST="${DEMO_HOST:-127.0.0.1}"
PORT="${DEMO_PORT:-3000}"
URL="http://$HOST:$PORT"

for tool in "$CLI" "$PY" "$DAGSTER"; do
  if [ ! -x "$tool" ]; then
    echo "demo: $tool is missing; run 'make setup' first" >&2
    exit 2
  fi
done

# The demo is the project's own component instance (source `demo` on .demo/source.db).
DEMO_DEFS="$ROOT/cdc_assets/defs/demo/defs.yaml"
export DAGSTER_HOME="$ROOT/.demo/dagster_home"
# Spark's Python workers must run the venv's interpreter (it has the project's packages).
export PYSPARK_PYTHON="$ROOT/$PY"
export PYSPARK_DRIVER_PYTHON="$ROOT/$PY"

TDS_PORT="${DEMO_TDS_PORT:-14330}"
SPARK_REMOTE="${CDC_ASSETS_SPARK_REMOTE:-}"
if [ -n "${DEMO_SPARK_PORT:-}" ]; then  # another port than defs.yaml's spark.remote
  SPARK_REMOTE="sc://127.0.0.1:$DEMO_SPARK_PORT"
  export CDC_ASSETS_SPARK_REMOTE="$SPARK_REMOTE"
elif [ -z "$SPARK_REMOTE" ]; then
  SPARK_REMOTE=$(sed -n 's|^[[:space:]]*remote:[[:space:]]*\(sc://[^[:space:]#]*\).*|\1|p' \
    "$DEMO_DEFS" | head -n 1)
fi
PROCESSES=("$PY" -m cdc_assets.demo_processes --source "$SOURCE" --host "$HOST" --port "$PORT"
  --tds-port "$TDS_PORT" --tps "$TPS" --seed "$SEED" --max-rows "$MAX_ROWS"
  --retention-minutes "$RETENTION_MINUTES" --spark-remote "$SPARK_REMOTE" --parent "$PPID")

# One demo per folder: the lock is held by this script and then by the process it becomes, so a
# second `make demo` here stops before it touches the source or the sync state.
mkdir -p .demo
exec 9>>.demo/demo.lock
if ! flock -n 9; then
  echo "demo: another demo is running in this folder ($(cat .demo/demo.lock 2>/dev/null ||
    echo 'pid unknown')); stop it first (Ctrl-C in its terminal, or kill its pid), or run this one" \
    "from another clone" >&2
  exit 2
fi
echo "pid $$, UI at $URL" >.demo/demo.lock
# Its ports free, and no process of an earlier demo left (one killed with kill -9, say).
"${PROCESSES[@]}" check || exit 2

mkdir -p "$LOG_DIR"
new_source() {
  # Partitions, runs and Parquet of an earlier source do not describe a new one (dagster.yaml stays).
  rm -rf "$STORAGE"
  if [ -d "$DAGSTER_HOME" ]; then
    find "$DAGSTER_HOME" -mindepth 1 -maxdepth 1 ! -name dagster.yaml -exec rm -rf {} +
  fi
  "$CLI" emulator create "$SOURCE" --seed "$SEED" --rows "$ROWS" "$@"
}
if [ -f "$SOURCE" ] && ! "$CLI" emulator status "$SOURCE" >/dev/null 2>&1; then
  echo "demo: $SOURCE is not a usable demo source; creating it again (and clearing the sync state)"
  new_source --force
elif [ ! -f "$SOURCE" ]; then
  echo "demo: creating the demo source $SOURCE ($ROWS rows per table)"
  new_source
else
  echo "demo: reusing $SOURCE (and the sync state in $STORAGE and $DAGSTER_HOME)"
fi

# The code location lists the capture instances the capture job has established: scan until the
# change tables hold everything committed (the agent in the workload keeps scanning afterwards).
"$PY" - "$SOURCE" <<'EOF'
import sys
from cdc_assets import emulator
captured = 0
while (n := emulator.scan(sys.argv[1])) > 0:
    captured += n
print(f"demo: capture scan done ({captured} transactions captured)")
EOF

# The production path: the code location reaches the source as a real SQL Server — pyodbc and
# Microsoft ODBC Driver 18 (the PyPI wheel), TLS, a SQL login — to the emulator served over TDS on
# loopback (`cdc-assets emulator serve`, started below). Its config is the demo's defs.yaml with
# the `odbc:` connection a user writes for SQL Server, written as a cdc_assets.yaml to
# .demo/cdc_assets.yaml (the code location loads the file CDC_ASSETS_CONFIG names).
export CDC_DEMO_SOURCE_PASSWORD="${CDC_DEMO_SOURCE_PASSWORD:-Demo-Passw0rd}"
DEMO_CONFIG=.demo/cdc_assets.yaml
"$PY" - "$DEMO_DEFS" "$DEMO_CONFIG" "$TDS_PORT" "$ROOT" <<'EOF'
import sys
from pathlib import Path

import yaml

from cdc_assets.sqlserver.odbc_drivers import msodbcsql18_path

source, target, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
root = Path(sys.argv[4])  # a component's relative paths are relative to the project's root
driver = msodbcsql18_path()
if driver is None:
    sys.exit("demo: Microsoft ODBC Driver 18 (PyPI: mssql-python-odbc) is missing; run 'make setup'")
attributes = dict(yaml.safe_load(source.read_text())["attributes"])
project = {key: attributes.pop(key) for key in ("storage", "spark", "examples") if key in attributes}
data = {"sources": [attributes], **project}
for entry in data["sources"]:
    entry["connection"] = {
        "odbc": {
            "server": "127.0.0.1",
            "port": port,
            "database": "cdc_demo",
            "user": "cdc_reader",
            "password_env": "CDC_DEMO_SOURCE_PASSWORD",
            "driver": str(driver),
            "encrypt": "yes",
            "trust_server_certificate": True,  # the demo server's certificate is self-signed
        }
    }
storage = Path(data["storage"]["base_path"])
data["storage"]["base_path"] = str(storage if storage.is_absolute() else root / storage)
header = f"# Written by scripts/demo.sh from {source} (edit that one): the source over TDS.\n"
target.write_text(header + yaml.safe_dump(data, sort_keys=False))
EOF
export CDC_ASSETS_CONFIG="$ROOT/$DEMO_CONFIG"

# The instance's dagster.yaml: written once (telemetry and the "Join the Dagster community" dialog
# off, freshness policies on, queued runs launched within a second into warm run workers, at most
# 4 runs at once, sensor ticks purged after a day), then kept; a file an earlier demo wrote gets
# the settings added since (cdc_assets/dagster/demo/instance_settings.py).
"$PY" -m cdc_assets.dagster.demo.instance_settings "$DAGSTER_HOME"

# Runs that were in flight when Dagster last stopped abruptly (killed, or stuck in shutdown) stay
# STARTED in the run history, and the sensor would wait for them forever: no Dagster runs on this
# DAGSTER_HOME now, so mark them failed; the sensor retries their range. On a new DAGSTER_HOME this
# also creates the instance's SQLite storage once, before dagster dev's processes would race to
# (one of them failed with alembic's "more than one head").
"$PY" - <<'EOF'
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

STALE = [
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]
with DagsterInstance.get() as instance:
    for run in instance.get_runs(filters=RunsFilter(statuses=STALE)):
        instance.report_run_failed(run, "the demo's Dagster stopped while this run was in flight")
        print(f"demo: marked run {run.run_id} ({run.status.value}, interrupted earlier) as failed")
EOF

# The processes of the demo, started and watched by the process this script becomes (it keeps the
# lock on .demo/demo.lock and, for the parent check, this script's parent: make).
exec "${PROCESSES[@]}" run
