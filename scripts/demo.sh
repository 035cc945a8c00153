#!/usr/bin/env bash
# `make demo` (after `make setup`): the embedded CDC source with a live workload.
# Creates the demo database .demo/source.db when it is missing (or unreadable), then runs the
# workload generator with the capture agent, showing transactions, rows, the max LSN and the
# capture lag on one updating line until Ctrl-C. Safe to run twice: an existing source is reused
# and the workload continues from its current contents.
# Settings: DEMO_TPS (transactions per second, default 20), DEMO_ROWS (initial rows per table,
# default 1000), DEMO_SEED (default 0).
set -euo pipefail
cd "$(dirname "$0")/.."

CLI=.venv/bin/cdc-assets
SOURCE=.demo/source.db
TPS="${DEMO_TPS:-20}"
ROWS="${DEMO_ROWS:-1000}"
SEED="${DEMO_SEED:-0}"

if [ ! -x "$CLI" ]; then
  echo "demo: $CLI is missing; run 'make setup' first" >&2
  exit 2
fi

mkdir -p .demo
if [ -f "$SOURCE" ] && ! "$CLI" emulator status "$SOURCE" >/dev/null 2>&1; then
  echo "demo: $SOURCE is not a usable demo source; creating it again"
  "$CLI" emulator create "$SOURCE" --seed "$SEED" --rows "$ROWS" --force
elif [ ! -f "$SOURCE" ]; then
  echo "demo: creating the demo source $SOURCE ($ROWS rows per table)"
  "$CLI" emulator create "$SOURCE" --seed "$SEED" --rows "$ROWS"
else
  echo "demo: reusing $SOURCE"
fi

echo "demo: running the workload with the capture agent (Ctrl-C stops it)"
exec "$CLI" emulator workload "$SOURCE" --tps "$TPS" --seed "$((SEED + 1))"
