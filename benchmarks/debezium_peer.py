"""Benchmark: Debezium beside the sync, on one workload: commit → Debezium event and commit →
our mirror, side by side, and whether Debezium's events equal the change rows our change logs
hold.

It runs the freshness benchmark's ``demo`` variant (:mod:`freshness_run`: a fresh emulated demo
source, ``dagster dev`` as ``make demo`` runs it, with Spark Connect and the warm run launcher)
and, once every mirror exists, serves the same source over TDS and starts Debezium 3.3's SQL
Server connector on it (embedded engine, as cdc_assets_tests/support/debezium_probe.py runs it;
its poll interval Debezium's default, 500 ms), waits for its initial snapshot, then runs the
workload (``cdc-assets emulator workload`` at ``--tps``, with its capture agent). After the
mirrors and Debezium reached the last commit it reports, per committed transaction:

- commit → Debezium event: ``cdc.lsn_time_mapping.tran_end_time`` to the time the engine handed
  over the transaction's last event (Debezium delivers to Kafka, not to a table: this is what
  a mirror in Delta costs above an event stream);
- commit → visible in our mirror: as :mod:`freshness` measures it (the Dagster event log's first
  mirror materialization at or above the commit's LSN, of every table it touched);

and compares Debezium's streamed events with the change tables' rows of the same LSN range
(operations, before and after images, commit and change LSNs, order within each table): what
our change logs hold (cdc_assets_tests/tds_server/test_debezium.py proves the change logs
equal these rows and Debezium's events).

    .venv/bin/python benchmarks/debezium_peer.py                 # 20 tx/s for 300 s (~15 min)
    .venv/bin/python benchmarks/debezium_peer.py --quick         # 20 tx/s for 60 s
    .venv/bin/python benchmarks/debezium_peer.py --seconds 20 --rows 200   # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))

from _common import machine_line  # noqa: E402
from freshness_analysis import analyze  # noqa: E402
from freshness_run import VARIANTS, run_variant  # noqa: E402

from cdc_assets import emulator  # noqa: E402
from cdc_assets.process_group import raise_keyboard_interrupt, stop_on_signals  # noqa: E402
from cdc_assets.tds_server import TdsServer, self_signed_context  # noqa: E402
from cdc_assets.workload import DEMO_TABLES  # noqa: E402
from cdc_assets_tests.support.debezium_probe import (  # noqa: E402
    DebeziumRun,
    change_events,
    compile_probe,
    debezium_tuple,
    first_difference,
    stored_canonical,
)

USER, PASSWORD = "debezium", "Peer-bench-1"
TYPES = {f"{t.schema}.{t.name}": {c.name: c.base_type for c in t.columns} for t in DEMO_TABLES}


class DebeziumBeside:
    """Serves the source over TDS and runs Debezium on it while the workload runs; keeps the
    events and the commit LSN the workload ended at."""

    def __init__(self, workdir: Path, drain_timeout: float) -> None:
        self.workdir = workdir
        self.drain_timeout = drain_timeout
        self.classes = compile_probe(workdir / "debezium-classes")
        self.run: DebeziumRun | None = None

    @contextlib.contextmanager
    def __call__(self, db: Path) -> Iterator[None]:
        tables = sorted(TYPES)
        with (
            TdsServer(db, logins={USER: PASSWORD}, tls=self_signed_context()) as server,
            DebeziumRun(
                self.classes,
                self.workdir / "debezium",
                port=server.port,
                database=db.stem,
                user=USER,
                password=PASSWORD,
                tables=tables,
                extra={"poll.interval.ms": "500"},
            ) as run,
        ):
            self.run = run
            run.wait_for(
                lambda events: any(e.snapshot == "last" for e in events),
                timeout=600,
                what="its initial snapshot",
            )
            yield
            last = _last_commit(db)
            run.wait_for(
                lambda events: any(
                    e.commit_lsn is not None and e.commit_lsn >= last for e in events
                ),
                timeout=self.drain_timeout,
                what="the last commit",
            )
            run.poll()


def _last_commit(db: Path) -> bytes:
    with emulator.connect(db, autocommit=True) as conn:
        found = conn.execute(
            "SELECT MAX(start_lsn) FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00"
        ).fetchone()[0]
    return bytes(found)


def _change_rows(db: Path, after: bytes) -> dict[str, list[Any]]:
    """Each table's change rows above ``after`` as :func:`change_events`' events."""
    found: dict[str, list[Any]] = {}
    with emulator.connect(db, autocommit=True) as conn:
        instances = conn.execute(
            "SELECT OBJECT_SCHEMA_NAME(source_object_id) + '.' + OBJECT_NAME(source_object_id), "
            "capture_instance FROM cdc.change_tables"
        ).fetchall()
        for table, instance in instances:
            types = TYPES[table]
            columns = ", ".join(f"[{name}]" for name in types)
            rows = conn.execute(
                "SELECT [__$start_lsn], [__$seqval], [__$command_id], [__$operation], "
                f"{columns} FROM [cdc].[{instance}_CT] WHERE [__$start_lsn] > ?",
                after,
            ).fetchall()
            images = [
                (
                    *r[:4],
                    tuple(
                        stored_canonical(v, t) for v, t in zip(r[4:], types.values(), strict=True)
                    ),
                )
                for r in rows
            ]
            found[table] = change_events(images)
    return found


def _percentiles(values: list[float]) -> str:
    if not values:
        return f"{'-':>7} {'-':>7} {'-':>7}"
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return f"{at(0.5):7.2f} {at(0.95):7.2f} {ordered[-1]:7.2f}"


def report(result: dict[str, Any], run: DebeziumRun, db: Path) -> bool:
    """Prints the latencies side by side and the events' comparison; whether they are equal."""
    baseline = int(result["baseline_lsn"]).to_bytes(10, "big")
    streamed = [e for e in run.events if e.snapshot == "false" and e.commit_lsn > baseline]
    delivered: dict[int, float] = {}
    for event in streamed:
        lsn = int.from_bytes(event.commit_lsn, "big")
        delivered[lsn] = max(delivered.get(lsn, 0.0), event.received_ms / 1000)
    commits = result["commits"]
    to_event = [delivered[c.lsn] - c.committed for c in commits if c.lsn in delivered]
    to_mirror = [c.visible - c.committed for c in commits if c.visible is not None]
    print(f"\n{len(commits)} committed transactions after Debezium's snapshot")
    print(f"  {'seconds (per committed transaction)':<44} {'p50':>7} {'p95':>7} {'max':>7}  n")
    for label, values in (
        ("commit → Debezium event (last of the tx)", to_event),
        ("commit → visible in our mirror", to_mirror),
    ):
        print(f"  {label:<44} {_percentiles(values)}  {len(values)}")
    ours = _change_rows(db, baseline)
    equal = True
    for table, events in ours.items():
        types = TYPES[table]
        theirs = [debezium_tuple(e, types) for e in streamed if e.table == table]
        want = [(c, s, op, b, a) for c, s, _, op, b, a in events]
        same = theirs == want
        equal &= same
        note = "equal" if same else first_difference(table, list(types), theirs, want)
        print(f"  events of {table}: Debezium {len(theirs)}, change rows {len(want)}: {note}")
    return equal


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="workload seconds (300)")
    parser.add_argument("--quick", action="store_true", help="60 s of workload")
    parser.add_argument("--tps", type=float, default=20.0, help="transactions per second (20)")
    parser.add_argument("--rows", type=int, default=1000, help="initial rows per table (1000)")
    parser.add_argument("--setup-timeout", type=float, default=600.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--keep", type=Path, help="work here and keep the files (logs, storage)")
    args = parser.parse_args(argv)
    stop_on_signals(raise_keyboard_interrupt)
    if args.quick:
        args.seconds = min(args.seconds, 60.0)
    variant = VARIANTS["demo"]
    print(machine_line())
    print(
        f"debezium_peer: {variant.describe()}; Debezium 3.3.1 embedded on the same source over "
        f"TDS; workload {args.tps:g} tx/s for {args.seconds:g} s, {args.rows} rows per table"
    )
    with contextlib.ExitStack() as stack:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            workdir = args.keep
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cdc_peer_")))
        beside = DebeziumBeside(workdir, args.drain_timeout)
        meta = run_variant(args, variant, workdir, None, beside)
        result = analyze(workdir, meta)
        assert beside.run is not None
        equal = report(result, beside.run, workdir / "source.db")
    print(machine_line())
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
