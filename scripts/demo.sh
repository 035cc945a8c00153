#!/usr/bin/env bash
# `make demo` (after `make setup`): continuous CDC sync of the embedded demo source in the Dagster UI.
#
# 1. Creates the emulated SQL Server source .demo/source.db when it is missing (or unreadable) —
#    a new source also clears the previous sync state (.demo/storage, .demo/dagster_home) — or
#    reuses it, and runs the capture job until the change tables hold everything committed, so the
#    code location finds every capture instance.
# 2. Serves the source over TDS on 127.0.0.1:DEMO_TDS_PORT (`cdc-assets emulator serve`): the code
#    location connects to it as to a real SQL Server (`odbc:` with Microsoft ODBC Driver 18, in
#    .demo/cdc_assets.yaml, written from the demo's component instance cdc_assets/defs/demo/defs.yaml). Starts the workload generator with the
#    capture agent in the background (its own process group, status lines in .demo/workload.log).
# 3. Starts a Spark Connect server (spark.remote in the demo's defs.yaml) that every run attaches to,
#    so a run does not start a Spark driver of its own (log in .demo/logs/spark-connect.log).
# 4. Runs `dagster dev -w workspace.yaml` with the persistent instance DAGSTER_HOME=.demo/dagster_home
#    (its dagster.yaml is written once) and prints the UI address; the sensor demo_sync_sensor runs
#    by default and keeps the change logs and mirrors in sync.
# Ctrl-C (or a TERM to this script) stops Dagster, then the workload, and leaves no process behind.
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
WORKLOAD_LOG=$LOG_DIR/workload.log
DAGSTER_LOG=$LOG_DIR/dagster.log
SPARK_LOG=$LOG_DIR/spark-connect.log
TDS_LOG=$LOG_DIR/tds-server.log
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

if ! "$PY" - "$HOST" "$PORT" <<'EOF'
import socket, sys
with socket.socket() as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((sys.argv[1], int(sys.argv[2])))
    except OSError:
        sys.exit(1)
EOF
then
  echo "demo: $HOST:$PORT is already in use; stop what listens there or pick another port," \
    "e.g. DEMO_PORT=3001 make demo" >&2
  exit 2
fi

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
TDS_PORT="${DEMO_TDS_PORT:-14330}"
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

mkdir -p "$DAGSTER_HOME"
if [ ! -f "$DAGSTER_HOME/dagster.yaml" ]; then
  cat >"$DAGSTER_HOME/dagster.yaml" <<'EOF'
# The Dagster instance of `make demo` (written by scripts/demo.sh; edit freely, it is kept).
telemetry:
  enabled: false
freshness:
  enabled: true                # the mirrors' freshness policies: a stalled sync shows as overdue
run_coordinator:               # launch queued runs within a second, not Dagster's default 5 s
  module: dagster
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
concurrency:
  runs:
    max_concurrent_runs: 4     # the sync sensor runs one range at a time per source
retention:
  sensor:
    purge_after_days:
      skipped: 1               # the sensor skips a tick every few seconds while nothing changed
      success: 1               # ... or requests a run every few seconds while it does
      failure: 7
EOF
fi

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

# SIGINT is ignored by background commands of a script; `env --default-signal` (coreutils >= 8.31)
# gives the workload and Dagster a working Ctrl-C.
DEFAULT_SIGNALS=(env)
if env --default-signal=INT true 2>/dev/null; then
  DEFAULT_SIGNALS=(env --default-signal=INT,TERM)
fi

WORKLOAD_PID=""
SERVE_PID=""
SPARK_PID=""
DAGSTER_PID=""
WAITER_PID=""
LINES_PID=""
STATUS=0
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $state != Z* ]]
}
group_alive() {  # a live (not zombie) process is left in process group $1
  ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
# Stop process group $1: Ctrl-C (unless $3 is "no-int": it had one), $2 tenths of a second for
# all of it to exit, then TERM and KILL.
stop_group() {
  local pgid=$1 patience=$2
  if [ "${3:-}" != no-int ]; then
    kill -INT -- "-$pgid" 2>/dev/null || true
  fi
  for _ in $(seq "$patience"); do
    group_alive "$pgid" || break
    sleep 0.1
  done
  if group_alive "$pgid"; then
    echo "demo: killing what is left of process group $pgid:" \
      "$(ps -eo pgid=,pid=,args= | awk -v g="$pgid" '$1 == g { print $2, substr($3, 1, 60) }' |
        tr '\n' ';')" >&2
    kill -TERM -- "-$pgid" 2>/dev/null || true
    sleep 3
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
  wait "$pgid" 2>/dev/null || true
}
on_signal() {
  if [ "$STATUS" -ne 0 ]; then
    echo "demo: still stopping (Dagster shuts down its runs first)" >&2
    return
  fi
  STATUS=$1
  # Dagster runs in its own process group: one Ctrl-C for all of it (webserver, daemon, code
  # server, run workers), as the terminal would send, and dagster dev shuts down in order.
  if [ -n "$DAGSTER_PID" ]; then
    kill -INT -- "-$DAGSTER_PID" 2>/dev/null || true
  else
    exit "$STATUS"
  fi
}
cleanup() {
  local status=$?
  if [ "$STATUS" -ne 0 ]; then
    status=0  # stopped on request (Ctrl-C or TERM): the way this demo ends
  fi
  trap - EXIT
  trap 'echo "demo: still stopping the workload" >&2' INT TERM
  if [ -n "$WAITER_PID" ]; then
    kill "$WAITER_PID" 2>/dev/null || true
    wait "$WAITER_PID" 2>/dev/null || true
  fi
  if [ -n "$DAGSTER_PID" ]; then
    if alive "$DAGSTER_PID"; then
      stop_group "$DAGSTER_PID" 600
    else  # dagster dev is down; its run workers may still be recording an interrupted run
      stop_group "$DAGSTER_PID" 200 no-int
    fi
    echo "demo: Dagster stopped (its log: $DAGSTER_LOG)"
  fi
  if [ -n "$LINES_PID" ]; then
    kill -TERM "$LINES_PID" 2>/dev/null || true
    wait "$LINES_PID" 2>/dev/null || true
  fi
  if [ -n "$SPARK_PID" ]; then
    stop_group "$SPARK_PID" 150
    echo "demo: Spark Connect server stopped (its log: $SPARK_LOG)"
  fi
  if [ -n "$SERVE_PID" ]; then
    stop_group "$SERVE_PID" 50
    echo "demo: TDS server stopped (its log: $TDS_LOG)"
  fi
  if [ -n "$WORKLOAD_PID" ]; then
    # The workload stops its capture agent and logs a summary line on Ctrl-C.
    stop_group "$WORKLOAD_PID" 150
    echo "demo: workload stopped: $(tail -n 1 "$WORKLOAD_LOG" 2>/dev/null || echo '(no log)')"
  fi
  if [ "$STATUS" -ne 0 ]; then
    echo "demo: stopped; 'make demo' continues from here"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

echo "demo: serving $SOURCE over TDS on 127.0.0.1:$TDS_PORT (database cdc_demo, login" \
  "cdc_reader); log in $TDS_LOG"
setsid "${DEFAULT_SIGNALS[@]}" "$CLI" emulator serve "$SOURCE" --port "$TDS_PORT" \
  --database cdc_demo --user cdc_reader --password-env CDC_DEMO_SOURCE_PASSWORD \
  >"$TDS_LOG" 2>&1 </dev/null &
SERVE_PID=$!
for _ in $(seq 100); do
  grep -q "over TDS" "$TDS_LOG" 2>/dev/null && break
  alive "$SERVE_PID" || break
  sleep 0.1
done
if ! alive "$SERVE_PID"; then
  echo "demo: the TDS server stopped at once (pick another port: DEMO_TDS_PORT=...):" >&2
  cat "$TDS_LOG" >&2
  exit 1
fi

echo "demo: starting the workload ($TPS tx/s) with the capture agent; log in $WORKLOAD_LOG"
# setsid: a process group of its own, stopped by cleanup after Dagster (not by the terminal).
setsid "${DEFAULT_SIGNALS[@]}" "$CLI" emulator workload "$SOURCE" --tps "$TPS" \
  --seed "$((SEED + 1))" --max-rows "$MAX_ROWS" --retention-minutes "$RETENTION_MINUTES" \
  --cleanup-every 300 >"$WORKLOAD_LOG" 2>&1 </dev/null &
WORKLOAD_PID=$!
sleep 1
if ! alive "$WORKLOAD_PID"; then
  echo "demo: the workload stopped at once:" >&2
  cat "$WORKLOAD_LOG" >&2
  exit 1
fi

# Warm Spark: the runs attach to this Spark Connect server (spark.remote in the demo's defs.yaml)
# instead of each starting a Spark driver. Its own process group, stopped by cleanup after Dagster.
if [ -n "${DEMO_SPARK_PORT:-}" ]; then  # another port than defs.yaml's spark.remote
  export CDC_ASSETS_SPARK_REMOTE="sc://127.0.0.1:$DEMO_SPARK_PORT"
fi
if [ -n "${CDC_ASSETS_SPARK_REMOTE:-}" ] ||
  grep -qE '^[[:space:]]*remote:[[:space:]]*sc://' "$CDC_ASSETS_CONFIG"; then
  echo "demo: starting the Spark Connect server the runs attach to; log in $SPARK_LOG"
  setsid "${DEFAULT_SIGNALS[@]}" "$PY" -m cdc_assets.spark.connect_server \
    >"$SPARK_LOG" 2>&1 </dev/null &
  SPARK_PID=$!
  spark_ready=""
  for _ in $(seq 120); do  # up to ~4 min on a busy machine; stop at once if the server exited
    if "$PY" -m cdc_assets.spark.connect_server --wait --timeout 2 2>/dev/null; then
      spark_ready=1
      break
    fi
    alive "$SPARK_PID" || break
  done
  if [ -z "$spark_ready" ]; then
    echo "demo: the Spark Connect server did not start (last lines of $SPARK_LOG):" >&2
    tail -n 5 "$SPARK_LOG" >&2
    exit 1
  fi
fi

banner="demo: Dagster UI at $URL — the sensor demo_sync_sensor keeps the mirrors in sync; Ctrl-C stops everything"
echo "demo: starting Dagster (DAGSTER_HOME=$DAGSTER_HOME); the UI will be at $URL;" \
  "Dagster's and Spark's full log: $DAGSTER_LOG"
if command -v curl >/dev/null 2>&1; then
  (  # say it again once the UI answers, below Dagster's start-up log
    for _ in $(seq 600); do
      if curl -sf -o /dev/null "$URL/server_info" 2>/dev/null; then
        printf '\n%s\n\n' "$banner"
        exit 0
      fi
      sleep 1
    done
  ) &
  WAITER_PID=$!
else
  echo "$banner"
fi

# dagster dev in a process group of its own, so that one Ctrl-C (or a TERM to this script) reaches
# it exactly once, through on_signal; this script waits for it to shut down.
setsid "${DEFAULT_SIGNALS[@]}" "$DAGSTER" dev -w workspace.yaml -h "$HOST" -p "$PORT" \
  >>"$DAGSTER_LOG" 2>&1 </dev/null &
DAGSTER_PID=$!
# One line per finished run and the log's warnings and errors (stopped by cleanup, with TERM).
setsid "$PY" -m cdc_assets.dagster.run_lines "$DAGSTER_LOG" </dev/null &
LINES_PID=$!
while :; do
  wait "$DAGSTER_PID" && dagster_status=0 || dagster_status=$?
  # A signal interrupts `wait` (status > 128) while dagster dev is still shutting down.
  alive "$DAGSTER_PID" || break
done
exit "$dagster_status"
