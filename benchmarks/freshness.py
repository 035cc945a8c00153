"""Benchmark: freshness in the ``dagster dev`` setup: commit in the source → row visible in the
mirror, and where the time goes (issue 7, question 5). Target: capture latency + 10 s.

Per variant it builds a fresh emulated demo source in a temporary directory (``cdc-assets emulator
create``, then the capture scan), writes a project config (storage in the temporary directory) and
a ``DAGSTER_HOME`` with a ``dagster.yaml`` as ``scripts/demo.sh`` writes it, and starts the real
``dagster dev -w workspace.yaml`` on a free port in a process group of its own. Once the sensor has
taken the snapshot and every mirror exists, ``cdc-assets emulator workload`` (with its capture
agent) runs at ``--tps`` for ``--seconds``; the benchmark waits until the mirrors hold the last
commit and stops the whole process group. Then it measures, for every committed transaction:

- commit time: ``cdc.lsn_time_mapping.tran_end_time``;
- captured: the first time the benchmark saw ``sys.fn_cdc_get_max_lsn()`` at or above the
  commit's LSN (sampled every 0.1 s);
- visible: the first ``ASSET_MATERIALIZATION`` event (Dagster event log) of the mirror of every
  table the transaction touched (its LSN in that table's change table) with ``mirror_lsn`` at or
  above the commit's LSN;

and, per range run, where the time went, from the event log (sensor tick, run creation,
``RUN_ENQUEUED`` … ``RUN_SUCCESS``, steps, materializations) and Spark's event log (switched on
through the project config's ``spark.conf``: the SparkContext's start and the Spark jobs).

Variants (each on its own fresh source; the ratios are against ``default`` of the same run):

- ``default``: the demo's setup (``sensor_interval_seconds: 5``, Dagster's run queue, no JVM
  options);
- ``tuned``: only settings a deployment owns, no product code: sensor interval 1 s, the run
  queue's ``dequeue_interval_seconds: 1``, and driver JVM options in the project config's
  ``spark.conf`` (client JIT, serial GC, and a class-data-sharing archive of the classes a Spark
  start loads, recorded at the start of this run);
- ``in-process``: no ``dagster dev``: the sync sensor's ``evaluate()`` in a loop and each run it
  asks for executed in this process on one Spark session kept across runs (what an in-process
  run launcher with a long-lived Spark session would give; no run queue, process or Spark start).
- ``demo``: ``make demo``'s setup (sensor interval 2 s, Spark Connect, warm run workers);
  ``demo-histories`` (asked for by name only): the same with a history on every table; its
  report has each range run's history step and how long its change-log step waited for the
  range run before it (:mod:`cdc_assets.dagster.sync.range_order`).

After the variants it times, in fresh processes, Spark's start with each JVM option against the
default, the code location's load, and (when the Python packages of ``pyspark[connect]`` are
importable: project dependencies) a session on a long-running Spark Connect server (the
``spark-connect`` jar ships in the pyspark wheel). Spark's event log is on in every variant (for
the breakdown); the in-process variant also turns Spark's console progress bar off.

The code of this checkout is what runs (it goes first on ``PYTHONPATH``), whatever checkout the
venv's editable install points at.

    .venv/bin/python benchmarks/freshness.py            # 300 s of workload per variant (~30 min)
    .venv/bin/python benchmarks/freshness.py --quick    # 60 s per variant, fewer repetitions
    .venv/bin/python benchmarks/freshness.py --keep DIR # keep sources, storage, logs, event logs
    .venv/bin/python benchmarks/freshness.py --reanalyze DIR  # report again from a kept DIR

The pieces: :mod:`freshness_run` (set up, run and stop a variant), :mod:`freshness_analysis`
(commits, runs and their timings joined), :mod:`freshness_report` (what is printed),
:mod:`freshness_probes` (start-up probes in fresh processes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The project code of this checkout, here and in every process started below.
sys.path.insert(1, str(ROOT))

from _common import machine_line  # noqa: E402
from freshness_analysis import analyze  # noqa: E402
from freshness_probes import probes, record_cds_archive  # noqa: E402
from freshness_report import TARGET_SLACK, compare, report_variant  # noqa: E402
from freshness_run import SOURCE, VARIANTS, run_variant  # noqa: E402

from cdc_assets.process_group import raise_keyboard_interrupt, stop_on_signals  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="workload seconds (300)")
    parser.add_argument("--quick", action="store_true", help="60 s of workload, fewer repeats")
    parser.add_argument("--tps", type=float, default=5.0, help="transactions per second (5)")
    parser.add_argument("--rows", type=int, default=1000, help="initial rows per table (1000)")
    parser.add_argument(
        "--variants",
        default=",".join(v for v in VARIANTS if not VARIANTS[v].histories),
        help=f"comma-separated, of {', '.join(VARIANTS)} (all but demo-histories)",
    )
    parser.add_argument("--setup-timeout", type=float, default=600.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the files (logs, storage)")
    parser.add_argument(
        "--connect-deps",
        help="where pyspark[connect]'s Python packages are when not in the venv (paths joined "
        "by ':')",
    )
    parser.add_argument(
        "--reanalyze", type=Path, help="only report again on the variants kept in this --keep dir"
    )
    args = parser.parse_args(argv)
    # SIGTERM or SIGHUP stop it as Ctrl-C does: its finally blocks stop dagster dev, the
    # workload and the Spark Connect server (which also get SIGTERM if this process is killed).
    stop_on_signals(raise_keyboard_interrupt)
    if args.quick:
        args.seconds = min(args.seconds, 60.0)
    repeat = 2 if args.quick else 3
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; use {', '.join(VARIANTS)}")
    print(machine_line())
    print(
        f"freshness: dagster dev with source '{SOURCE}' (5 demo tables, {args.rows} rows each), "
        f"workload {args.tps:g} tx/s for {args.seconds:g} s per variant; target: commit → "
        f"visible <= capture latency + {TARGET_SLACK:.0f} s"
    )
    if args.reanalyze is not None:
        summaries = {
            name: report_variant(
                analyze(
                    args.reanalyze / name,
                    json.loads((args.reanalyze / name / "meta.json").read_text()),
                )
            )
            for name in names
            if (args.reanalyze / name / "meta.json").exists()
        }
        compare(summaries)
        print(machine_line())
        return 0
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            base = args.keep
        else:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc_fresh_")))
        cds = base / "spark-classes.jsa"
        needs_cds = any("{cds}" in VARIANTS[n].java_options for n in names)
        if needs_cds:
            seconds = record_cds_archive(cds)
            size = cds.stat().st_size / 2**20 if cds.exists() else 0
            print(
                f"class-data-sharing archive of a Spark start recorded in {seconds:.1f} s "
                f"({size:.0f} MiB)"
            )
        summaries = {}
        last_workdir = None
        for name in names:
            workdir = base / name
            if workdir.exists():
                shutil.rmtree(workdir)
            workdir.mkdir()
            meta = run_variant(args, VARIANTS[name], workdir, cds)
            summaries[name] = report_variant(analyze(workdir, meta))
            last_workdir = workdir
        compare(summaries)
        if last_workdir is not None:
            if not cds.exists():
                record_cds_archive(cds)
            probes(last_workdir, cds, repeat, args.connect_deps)
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
