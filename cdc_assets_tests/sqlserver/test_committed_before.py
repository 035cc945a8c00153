"""``committed_before``: the cut-off LSN of sync.retain_ranges, by the server's clock."""

from __future__ import annotations

import time
from typing import Any

from cdc_assets.sqlserver.lsn_queries import get_max_lsn
from cdc_assets.sqlserver.ranges import committed_before, last_transaction_lsn

from .conftest import ORDERS_DDL


def test_the_last_transaction_older_than_the_retention(make_cdc_db: Any) -> None:
    db = make_cdc_db(ORDERS_DDL)
    db.execute("INSERT INTO [dbo].[orders] ([id], [name], [amount]) VALUES (1, N'a', 1.00)")
    db.scan()
    first = last_transaction_lsn(db.conn)
    assert first is not None
    time.sleep(1.2)
    db.execute("INSERT INTO [dbo].[orders] ([id], [name], [amount]) VALUES (2, N'b', 2.00)")
    db.scan()
    second = last_transaction_lsn(db.conn)
    assert second is not None and second > first
    assert committed_before(db.conn, 0) == second  # everything committed so far
    cut = committed_before(db.conn, 1.0)  # the second insert is younger than a second
    assert cut is not None and first <= cut < second
    assert committed_before(db.conn, 86400) is None  # nothing was committed a day ago
    assert get_max_lsn(db.conn) >= second
