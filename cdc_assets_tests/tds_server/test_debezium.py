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
    change_events,
    compile_probe,
    debezium_tuple,
    first_difference,
    stored_canonical,
)
from cdc_assets_tests.support.tds import PASSWORD, USER


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


def _types(table: TableDef) -> dict[str, str]:
    return {c.name: c.base_type for c in table.columns}


def _collect(df: DataFrame, names: list[str], types: dict[str, str]) -> list[Any]:
    """Rows of ``df`` with the metadata columns ``names`` first, then the table's columns in
    order as one image (a ``datetimeoffset`` as its UTC epoch microseconds)."""
    columns = [F.col(f"`{n}`") for n in names]
    for name, type_name in types.items():
        column = F.col(f"`{name}`")
        columns.append(F.unix_micros(column) if type_name == "datetimeoffset" else column)
    found = []
    for row in df.select(*columns).collect():
        values = zip(row[len(names) :], types.values(), strict=True)
        found.append((*row[: len(names)], tuple(stored_canonical(v, t) for v, t in values)))
    return found


def _our_events(harness: SyncHarness, table: CapturedTable, types: dict[str, str]) -> list[Any]:
    """The change log's range partitions as Debezium's events (:func:`change_events`)."""
    keys = harness.instance.get_dynamic_partitions(partitions_name(SOURCE))
    rows: list[Any] = []
    for key in keys:
        if key == "snapshot":
            continue
        df = harness.source.store.read(harness.spark, table.change_log_key.path, key)
        rows += _collect(df, ["__$start_lsn", "__$seqval", "__$command_id", "__$operation"], types)
    return change_events(rows)


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
        theirs = [debezium_tuple(e, types) for e in mine]
        want = [(c, s, op, b, a) for c, s, _, op, b, a in ours[name]]
        assert theirs == want, first_difference(name, list(types), theirs, want)
        snapshot = Counter(
            debezium_tuple(e, types)[4] for e in debezium.events if e.table == name and e.op == "r"
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
