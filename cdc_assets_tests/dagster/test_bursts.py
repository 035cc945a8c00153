"""A burst through the real sync sensor: ranges stay bounded by transactions, not by rows.

The sensor plans each range with at most ``sync.max_transactions_per_range`` transactions. One
burst tests that bound and the sync's correctness, with a bound of 200: 150 small transactions
(one or two rows: every third touches both tables, so transactions and rows differ), an INSERT of
20,000 rows in one transaction, 249 small transactions, then an UPDATE of every item row in one
transaction. A transaction cannot be split, so the sensor must plan

- a range of 200 transactions holding every row of the INSERT (counted as one transaction, not as
  20,001 rows),
- a range of 200 small transactions (full: the bound is reached, not undercut),
- a range of exactly the UPDATE (the 401st transaction, alone), every row of it,

contiguous after the chain's end, and the mirrors then equal the source tables.

The transactions of a range are counted from what the runs wrote: the distinct ``__$start_lsn``
(commit LSN) in the change-log partitions of every table, united over the tables (a transaction
touching two tables counts once), and compared with the commit LSNs ``cdc.lsn_time_mapping`` has
in that range. A planner counting rows, ignoring the bound or off by one fails this test.

One burst rather than one test per burst: every run costs seconds of Spark (the first ones over
ten on a cold session), so four runs keep the test near 20 s in a warm session and the file,
run alone, under 50 s on 2 cores.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from pathlib import Path

from dagster import DagsterInstance
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from cdc_assets import emulator
from cdc_assets.dagster.sync.chain import range_partitions
from cdc_assets.dagster.sync.names import partitions_name
from cdc_assets.lsn import LsnRange
from cdc_assets.workload import ColumnDef, TableDef

from .conftest import SOURCE, SyncHarness, failure_text, make_harness

ITEMS = TableDef(
    "dbo",
    "items",
    (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("qty", "int"),
        ColumnDef("name", "nvarchar(40)"),
    ),
    primary_key=("id",),
)
EVENTS = TableDef(
    "dbo",
    "events",
    (ColumnDef("id", "int", nullable=False), ColumnDef("note", "varchar(40)")),
    primary_key=("id",),
)
TABLES = (ITEMS, EVENTS)
MAX_TRANSACTIONS = 200
BIG_ROWS = 20_000
BEFORE, AFTER = 150, 249  # small transactions before and after the big INSERT
INSERT_ITEM = "INSERT INTO [dbo].[items] ([id], [qty], [name]) VALUES (?, ?, ?)"
INSERT_EVENT = "INSERT INTO [dbo].[events] ([id], [note]) VALUES (?, ?)"

# The commit LSNs of captured transactions (tran_id 0x00 rows only mark capture progress).
COMMITS = """
SELECT start_lsn FROM cdc.lsn_time_mapping
WHERE start_lsn > ? AND start_lsn <= ? AND tran_id <> 0x00
"""


class Writer:
    """One non-autocommit emulator connection; each method is one committed transaction."""

    def __init__(self, harness: SyncHarness, first_id: int) -> None:
        self.conn = emulator.connect(str(harness.db), autocommit=False)
        self.cursor = self.conn.cursor()
        self.next_id = first_id

    def _ids(self, count: int) -> range:
        first, self.next_id = self.next_id, self.next_id + count
        return range(first, first + count)

    def small(self, index: int) -> None:
        """One event row; every third transaction also one item row (two tables, two rows)."""
        (key,) = self._ids(1)
        self.cursor.execute(INSERT_EVENT, key, f"small {index}")
        if index % 3 == 0:
            self.cursor.execute(INSERT_ITEM, key, index, f"small {index}")
        self.conn.commit()

    def big_insert(self, rows: int) -> bytes:
        """``rows`` item rows and one event row in one transaction; its commit LSN."""
        ids = self._ids(rows + 1)
        self.cursor.executemany(INSERT_ITEM, [(i, i % 97, f"big {i}") for i in ids[:-1]])
        self.cursor.execute(INSERT_EVENT, ids[-1], "big")
        self.conn.commit()
        return self._last_commit()

    def update_all_items(self) -> tuple[bytes, int]:
        """One UPDATE of every item row; its commit LSN and the rows it updated."""
        self.cursor.execute("UPDATE [dbo].[items] SET [qty] = COALESCE([qty], 0) + 1")
        updated = self.cursor.rowcount
        self.conn.commit()
        return self._last_commit(), updated

    def _last_commit(self) -> bytes:
        lsn = self.conn.last_commit_lsn
        assert lsn is not None
        return bytes(lsn)

    def close(self) -> None:
        self.conn.close()


def _range_keys(harness: SyncHarness) -> set[str]:
    keys = harness.instance.get_dynamic_partitions(partitions_name(SOURCE))
    return {r.key for r in range_partitions(keys)}


def _sync_until_idle(harness: SyncHarness, *, limit: int = 30) -> list[LsnRange]:
    """Tick the real sensor and execute what it requests until it has nothing to do; the ranges
    it added, in order."""
    added: list[LsnRange] = []
    for _ in range(limit):
        before = _range_keys(harness)
        data = harness.tick()
        added += [LsnRange.parse_key(k) for k in sorted(_range_keys(harness) - before)]
        if not data.run_requests:
            return added
        result = harness.execute(data.run_requests[0])
        assert result.success, failure_text(result)
    raise AssertionError(f"the sensor still requests runs after {limit} runs")


def _written(harness: SyncHarness, ranges: list[LsnRange]) -> list[Counter[bytes]]:
    """Per range: change rows per commit LSN in its change-log partitions over every table (one
    Spark job for all of them)."""
    frames = [
        harness.source.store.read(harness.spark, table.change_log_key.path, lsn_range.key).select(
            F.lit(lsn_range.key).alias("range"), F.col("`__$start_lsn`").alias("lsn")
        )
        for lsn_range in ranges
        for table in harness.source.tables
    ]
    counts = functools.reduce(DataFrame.unionAll, frames).groupBy("range", "lsn").count()
    rows: dict[str, Counter[bytes]] = {r.key: Counter() for r in ranges}
    for row in counts.collect():
        rows[row["range"]][bytes(row["lsn"])] += int(row["count"])
    return [rows[r.key] for r in ranges]


def _committed(harness: SyncHarness, lsn_range: LsnRange) -> set[bytes]:
    conn = harness.source.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(COMMITS, lsn_range.lo.raw, lsn_range.hi.raw)
        return {bytes(row[0]) for row in cursor.fetchall()}
    finally:
        conn.close()


def _assert_bounded_chain(harness: SyncHarness, added: list[LsnRange]) -> list[Counter[bytes]]:
    """Every added range holds at most the bound of transactions (as written and as committed),
    and the chain of all range partitions is contiguous; the rows per commit LSN of each."""
    chain = range_partitions(harness.instance.get_dynamic_partitions(partitions_name(SOURCE)))
    assert all(a.hi == b.lo for a, b in itertools.pairwise(chain)), f"gap or overlap: {chain}"
    assert added and added == chain[-len(added) :], "the sensor's ranges are not the chain's end"
    written = _written(harness, added)
    for lsn_range, rows in zip(added, written, strict=True):
        assert set(rows) == _committed(harness, lsn_range), (
            f"{lsn_range.key}: the change logs hold other transactions than the source committed"
        )
        assert len(rows) <= MAX_TRANSACTIONS, (
            f"{lsn_range.key} holds {len(rows)} transactions (bound {MAX_TRANSACTIONS})"
        )
    return written


def test_a_burst_is_cut_into_ranges_by_transactions_not_rows(
    tmp_path: Path, spark: SparkSession, instance: DagsterInstance
) -> None:
    harness = make_harness(
        tmp_path, spark, instance, rows=20, tables=TABLES, max_transactions=MAX_TRANSACTIONS
    )
    _sync_until_idle(harness)  # the snapshot
    writer = Writer(harness, first_id=1_000_000)
    try:
        for i in range(BEFORE):
            writer.small(i)
        insert = writer.big_insert(BIG_ROWS)
        for i in range(BEFORE, BEFORE + AFTER):
            writer.small(i)
        update, updated = writer.update_all_items()
    finally:
        writer.close()
    assert updated > BIG_ROWS
    harness.capture()
    written = _assert_bounded_chain(harness, _sync_until_idle(harness))

    assert [len(rows) for rows in written] == [MAX_TRANSACTIONS, MAX_TRANSACTIONS, 1]
    assert [insert in rows for rows in written] == [True, False, False]
    assert written[0][insert] == BIG_ROWS + 1, "the INSERT's range lacks some of its rows"
    small = BEFORE + AFTER
    rows = small + (small + 2) // 3 + BIG_ROWS + 1 + 2 * updated
    assert sum(r.total() for r in written) == rows, "change rows missing or extra"
    assert written[2] == Counter({update: 2 * updated}), "the UPDATE's range: it, all of it"
    harness.assert_mirrors_equal_source()
