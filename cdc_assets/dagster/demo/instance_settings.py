"""The Dagster instance of ``make demo``: its ``dagster.yaml`` (``.demo/dagster_home``), written
once and kept (a person may edit it), so settings added later are added to a kept file that
lacks them (:data:`ADDED_LATER`).

``python -m cdc_assets.dagster.demo.instance_settings DAGSTER_HOME`` (run by ``scripts/demo.sh``)
writes it, or adds the missing settings, and says which. The browser test's instance is written
by the same function, so it checks what the demo shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ..warm_launcher import DAGSTER_YAML as WARM_LAUNCHER

HEADER = (
    "# The Dagster instance of `make demo` (written by scripts/demo.sh; edit freely, it is kept).\n"
)
# Top-level settings, each with what it is for.
SETTINGS = {
    "telemetry": "telemetry:\n  enabled: false\n",
    "nux": (
        'nux:                           # no "Join the Dagster community" dialog over the UI of\n'
        "  enabled: false               # a new instance\n"
    ),
    "freshness": (
        "freshness:\n"
        "  enabled: true                # the mirrors' freshness policies: a stalled sync shows as "
        "overdue\n"
    ),
    "run_coordinator": (
        "run_coordinator:               # launch queued runs within a second, not Dagster's "
        "default 5 s\n"
        "  module: dagster\n  class: QueuedRunCoordinator\n"
        "  config:\n    dequeue_interval_seconds: 1\n"
    ),
    "run_launcher": (
        "# each run starts in a worker process started before it, with Dagster and the project\n"
        "# loaded (5-7 s less a run)\n" + WARM_LAUNCHER
    ),
    "concurrency": (
        "concurrency:\n  runs:\n"
        "    max_concurrent_runs: 4     # range runs (two per source in flight), a snapshot, the "
        "health\n                               # or maintenance job, daily_orders\n"
        "    tag_concurrency_limits:\n"
        "      - key: cdc_assets/housekeeping  # health and maintenance: one run at a time per "
        "source,\n"
        "        value:                      # never all the slots the range runs need\n"
        "          applyLimitPerUniqueValue: true\n"
        "        limit: 1\n"
    ),
    "retention": (
        "retention:\n  sensor:\n    purge_after_days:\n"
        "      skipped: 1               # the sensor skips a tick every few seconds while nothing "
        "changed\n"
        "      success: 1               # ... or requests a run every few seconds while it does\n"
        "      failure: 7\n"
    ),
}


# Settings the demo's dagster.yaml has had since a later version: a kept file without them
# (written by an earlier one) gets them; the others are the person's to remove.
ADDED_LATER = ("nux",)


def write_instance_settings(home: Path) -> list[str]:
    """``home/dagster.yaml`` as the demo's when missing; else those of :data:`ADDED_LATER` it
    lacks (by their top-level key) added at its end. The keys written."""
    path = home / "dagster.yaml"
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + "".join(SETTINGS.values()))
        return list(SETTINGS)
    text = path.read_text()
    found = yaml.safe_load(text) or {}
    missing = [key for key in ADDED_LATER if key not in found]
    if missing:
        lines = "".join(SETTINGS[key] for key in missing)
        added = "\n# Added by a later make demo:\n" + lines
        path.write_text(text + ("" if text.endswith("\n") else "\n") + added)
    return missing


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m cdc_assets.dagster.demo.instance_settings HOME\n")
        return 2
    home = Path(args[0])
    existed = (home / "dagster.yaml").exists()
    written = write_instance_settings(home)
    if existed and written:
        print(f"demo: added {', '.join(written)} to {home / 'dagster.yaml'} (kept otherwise)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
