"""Debezium 3.3's SQL Server connector (embedded engine, no Kafka) reads the served emulator and
agrees with the project's change logs.

One JVM runs Debezium against the demo database served over TDS while the project syncs the same
database: its initial snapshot (``snapshot.mode: initial``) holds the rows of our snapshot
partitions, and the events it streams during a workload with every kind of transaction (multi-
table, key updates, delete and re-insert, rollbacks, a burst) are our change logs' rows of the
same LSN range: the same rows, operations, before and after images, commit LSNs
(``source.commit_lsn``) and change LSNs (``source.change_lsn`` = ``__$seqval``), in the same order
within each transaction, every demo table (``order lines`` included). The program is
cdc_assets_tests/support/debezium/DebeziumProbe.java, compiled once per session; its jars come
from scripts/install_jars.sh (never downloaded here).
"""

from __future__ import annotations

import ssl
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets import emulator
from cdc_assets.dagster.sync.names import partitions_name
from cdc_assets.dagster.sync.source import CapturedTable
from cdc_assets.spark.sqlserver_source import SNAPSHOT_LSN, drop_snapshot_columns
from cdc_assets.tds_server import TdsServer
from cdc_assets.workload import TRANSACTION_KINDS, TableDef
from cdc_assets_tests.dagster.conftest import SOURCE, SyncHarness, make_harness
from cdc_assets_tests.support.debezium_probe import (
    DebeziumRun,
    canonical,
    compile_probe,
    stored_canonical,
)
from cdc_assets_tests.support.tds import PASSWORD, USER

OPS = {1: "d", 2: "c"}


@pytest.fixture(scope="session")
def debezium_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_probe(tmp_path_factory.mktemp("debezium_probe"))


@pytest.fixture
def served(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance, tls_context: ssl.SSLContext
) -> Iterator[tuple[SyncHarness, TdsServer]]:
    harness = make_harness(tmp_path, spark, instance, seed=54, rows=12)
    harness.workload.burst_rows = 40
    with TdsServer(harness.db, logins={USER: PASSWORD}, tls=tls_context) as server:
        yield harness, server


def _types(table: TableDef) -> dict[str, tuple[str, int]]:
    return {c.name: (c.base_type, c.scale) for c in table.columns}


def _debezium_image(image: dict[str, Any] | None, types: dict[str, tuple[str, int]]) -> Any:
    if image is None:
        return None
    return tuple(canonical(image[name], types[name][0]) for name in types)


def _collect(df: DataFrame, names: list[str], types: dict[str, tuple[str, int]]) -> list[Any]:
    """Rows of ``df`` with the metadata columns ``names`` first, then the table's columns in
    order (a ``datetimeoffset`` as its UTC epoch microseconds)."""
    columns = [F.col(f"`{n}`") for n in names]
    for name, (type_name, _) in types.items():
        column = F.col(f"`{name}`")
        columns.append(F.unix_micros(column) if type_name == "datetimeoffset" else column)
    found = []
    for row in df.select(*columns).collect():
        head = tuple(row[: len(names)])
        values = row[len(names) :]
        found.append(
            (
                *head,
                tuple(
                    stored_canonical(v, t) for v, (t, _) in zip(values, types.values(), strict=True)
                ),
            )
        )
    return found


def _our_events(
    harness: SyncHarness, table: CapturedTable, types: dict[str, tuple[str, int]]
) -> list[tuple[Any, ...]]:
    """The change log's range partitions as Debezium's events: (commit LSN, change LSN,
    command id, op, before, after), in the change log's order; an update's two rows are one."""
    keys = harness.instance.get_dynamic_partitions(partitions_name(SOURCE))
    rows: list[Any] = []
    for key in keys:
        if key == "snapshot":
            continue
        df = harness.source.store.read(harness.spark, table.change_log_key.path, key)
        rows += _collect(df, ["__$start_lsn", "__$seqval", "__$command_id", "__$operation"], types)
    rows.sort(key=lambda r: (bytes(r[0]), r[2], bytes(r[1]), r[3]))
    events: list[tuple[Any, ...]] = []
    for start, seqval, command, operation, image in rows:
        position = (bytes(start), bytes(seqval), command)
        if operation == 3:
            events.append((*position, "u", image, None))
        elif operation == 4:
            assert events and events[-1][3] == "u" and events[-1][5] is None, (table, rows)
            events[-1] = (*events[-1][:5], image)
        else:
            before, after = (image, None) if operation == 1 else (None, image)
            events.append((*position, OPS[operation], before, after))
    return events


def _difference(table: str, names: list[str], theirs: list[Any], ours: list[Any]) -> str:
    """Where Debezium's events of ``table`` first differ from the change log's."""
    for n, (a, b) in enumerate(zip(theirs, ours, strict=False)):
        if a != b:
            columns = [
                (names[i], x, y)
                for image in (3, 4)
                if a[image] and b[image]
                for i, (x, y) in enumerate(zip(a[image], b[image], strict=True))
                if x != y
            ]
            return f"{table}: event {n}: Debezium {a[:3]} vs ours {b[:3]}; columns {columns}"
    return f"{table}: {len(theirs)} Debezium events, {len(ours)} in the change log"


def test_debezium_agrees_with_the_change_logs(
    served: tuple[SyncHarness, TdsServer], debezium_classes: Path, tmp_path: Path
) -> None:
    harness, server = served
    tables = {t.qualified_name.replace("[", "").replace("]", ""): t for t in harness.source.tables}
    defs = {f"{t.schema}.{t.name}": t for t in harness.workload.tables}
    assert set(tables) == set(defs) and "dbo.order lines" in tables
    with DebeziumRun(
        debezium_classes,
        tmp_path / "debezium",
        port=server.port,
        database=harness.db.stem,
        user=USER,
        password=PASSWORD,
        tables=sorted(tables),
    ) as debezium:
        harness.sync()  # our snapshot, before any write, as Debezium's
        debezium.wait_for(
            lambda events: any(e.snapshot == "last" for e in events),
            timeout=240,
            what="its initial snapshot",
        )
        for kind, _ in TRANSACTION_KINDS:  # every kind of transaction, then random ones
            harness.workload.run_transaction(kind)
        for _ in range(25):
            harness.workload.step()
        harness.capture()
        harness.sync()
        ours = {
            name: _our_events(harness, table, _types(defs[name])) for name, table in tables.items()
        }
        expected = sum(len(e) for e in ours.values())
        debezium.wait_for(
            lambda events: sum(e.snapshot == "false" for e in events) >= expected,
            timeout=180,
            what=f"the {expected} change events of our change logs",
        )
        debezium.poll()
    streamed = [e for e in debezium.events if e.snapshot == "false"]
    assert {e.op for e in streamed} == {"c", "u", "d"}
    found: dict[str, Any] = {}
    for name, table in tables.items():
        types = _types(defs[name])
        mine = [e for e in streamed if e.table == name]
        theirs = [
            (
                e.commit_lsn,
                e.change_lsn,
                e.op,
                _debezium_image(e.before, types),
                _debezium_image(e.after, types),
            )
            for e in mine
        ]
        want = [(c, s, op, b, a) for c, s, _, op, b, a in ours[name]]
        assert theirs == want, _difference(name, list(_types(defs[name])), theirs, want)
        snapshot = Counter(
            _debezium_image(e.after, types)
            for e in debezium.events
            if e.table == name and e.op == "r"
        )
        df = harness.source.store.read(harness.spark, table.change_log_key.path, "snapshot")
        if SNAPSHOT_LSN in df.columns:  # the partition's marker row is no row of the table
            df = drop_snapshot_columns(df)
        assert snapshot == Counter(r[0] for r in _collect(df, [], types)), name
        found[name] = (sum(snapshot.values()), Counter(e.op for e in mine))
    # across the tables of one transaction: Debezium's order is the change log's
    ordered = sorted(
        ((c, s, cmd, name, op) for name, events in ours.items() for c, s, cmd, op, _, _ in events),
        key=lambda r: (r[0], r[2], r[1]),
    )
    assert [(e.commit_lsn, e.change_lsn, e.table, e.op) for e in streamed] == [
        (c, s, name, op) for c, s, _, name, op in ordered
    ]
    print("Debezium vs change logs, per table (snapshot rows, streamed events by op):", found)
    assert all(n > 0 for n, _ in found.values())
    with emulator.connect(harness.db) as conn:  # every commit Debezium saw is a captured one
        captured = {
            bytes(r[0])
            for r in conn.execute(
                "SELECT start_lsn FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00"
            )
        }
    assert {e.commit_lsn for e in streamed} <= captured
