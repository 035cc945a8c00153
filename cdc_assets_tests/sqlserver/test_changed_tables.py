"""One statement tells which capture instances have change rows in a range, and how many."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver import changed_tables
from cdc_assets.sqlserver.catalog import discover
from cdc_assets.sqlserver.changed_tables import changed_instances, changes_per_instance_query
from cdc_assets.sqlserver.lsn_queries import get_max_lsn

DDL = [
    f"CREATE TABLE [dbo].[t{i}] ([id] int NOT NULL, [v] int NULL, CONSTRAINT [pk_t{i}] "
    "PRIMARY KEY ([id]))"
    for i in range(3)
]
NAMES = ["dbo_t0", "dbo_t1", "dbo_t2"]


def _statements_sent(db: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL texts sent on ``db``'s connection from now on."""
    sent: list[str] = []
    cursor_class = db.conn.cursor().__class__
    original = cursor_class.execute

    def recording(cursor: Any, sql: str, *params: Any) -> Any:
        sent.append(sql)
        return original(cursor, sql, *params)

    monkeypatch.setattr(cursor_class, "execute", recording)
    return sent


def test_counts_per_instance_in_one_statement_per_chunk(
    make_cdc_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = make_cdc_db(*DDL)
    start = get_max_lsn(db.conn)
    db.execute("BEGIN TRANSACTION")
    db.execute("INSERT INTO [dbo].[t0] ([id], [v]) VALUES (1, 1), (2, 2)")
    db.execute("UPDATE [dbo].[t0] SET [v] = 3 WHERE [id] = 1")  # before and after image
    db.execute("COMMIT")
    db.scan()
    middle = get_max_lsn(db.conn)
    db.execute("DELETE FROM [dbo].[t0] WHERE [id] = 2")
    db.execute("INSERT INTO [dbo].[t2] ([id], [v]) VALUES (7, 7)")
    db.scan()
    end = get_max_lsn(db.conn)

    sent = _statements_sent(db, monkeypatch)
    assert changed_instances(db.conn, NAMES, LsnRange(start, middle)) == {
        "dbo_t0": 4,
        "dbo_t1": 0,
        "dbo_t2": 0,
    }
    assert len(sent) == 1 and sent[0].count("UNION ALL") == 2
    assert changed_instances(db.conn, NAMES, LsnRange(middle, end)) == {
        "dbo_t0": 1,
        "dbo_t1": 0,
        "dbo_t2": 1,
    }
    monkeypatch.setattr(changed_tables, "CHUNK", 2)  # 3 instances: two statements
    sent.clear()
    assert changed_instances(db.conn, NAMES[::-1], LsnRange(start, end)) == {
        "dbo_t2": 1,
        "dbo_t1": 0,
        "dbo_t0": 5,
    }
    assert len(sent) == 2


def test_statements_are_cut_from_a_stable_list_whichever_tables_are_asked(
    make_cdc_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sensor asks about every table, a run about the quiet ones or the changed ones: cut
    from the database's instances, each asks with the same statement texts (compiled once by
    the server), sends none that holds no table asked about, and counts as before."""
    db = make_cdc_db(*DDL)
    start = get_max_lsn(db.conn)
    db.execute("INSERT INTO [dbo].[t1] ([id], [v]) VALUES (1, 1)")
    db.execute("INSERT INTO [dbo].[t2] ([id], [v]) VALUES (1, 1), (2, 2)")
    db.scan()
    lsn_range = LsnRange(start, get_max_lsn(db.conn))
    among = changed_tables.established_instances(discover(db.conn))
    assert among == NAMES

    sent = _statements_sent(db, monkeypatch)
    monkeypatch.setattr(changed_tables, "CHUNK", 2)  # statements: [t0, t1] and [t2]
    texts: dict[tuple[str, ...], list[str]] = {}
    for asked in (NAMES, ["dbo_t0", "dbo_t1"], ["dbo_t2"], ["dbo_t1", "dbo_t0"], ["dbo_t1"]):
        sent.clear()
        counts = changed_instances(db.conn, asked, lsn_range, among=among)
        assert counts == changed_instances(db.conn, asked, lsn_range)  # the same answer
        assert counts == {n: {"dbo_t1": 1, "dbo_t2": 2}.get(n, 0) for n in asked}
        texts[tuple(asked)] = sent[: len(sent) // 2]  # those cut from ``among``
    first, last = changes_per_instance_query(NAMES[:2]), changes_per_instance_query(NAMES[2:])
    assert texts[tuple(NAMES)] == [first, last]
    assert texts[("dbo_t0", "dbo_t1")] == texts[("dbo_t1", "dbo_t0")] == [first]
    assert texts[("dbo_t1",)] == [first]  # asked alone, it is counted with its neighbour
    assert texts[("dbo_t2",)] == [last]
