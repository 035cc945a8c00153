"""The log's current position, taken without snapshot isolation: DBLog's watermarks.

A lock-free snapshot chunk (DESIGN.md section 3) needs two LSNs from the log itself: a *low
watermark* L before its read, below every commit the read may miss, and a *high watermark* H
after it, above every commit the read saw. ``sys.fn_cdc_get_max_lsn()`` cannot give H: it is
the capture job's position and lags the log by the capture latency, so a commit the read saw can
lie above it.

The exact snapshot's savepoint gives such an LSN and needs neither snapshot isolation nor a write
to a user table (Materialize's ``cdc.rs``): ``SAVE TRANSACTION`` in an open transaction writes a
log record, and ``sys.dm_tran_database_transactions`` gives the transaction's first log record's
LSN (``database_transaction_begin_lsn``). Every commit written to the log before that record is
below it, every later one above it. The transaction only ever held a savepoint; it is rolled
back at once, in read committed, and holds no lock on any table. The capture job later passes
the record, so the max LSN reaches the watermark even when no captured table changes afterwards.

Watermarks need the login to hold VIEW SERVER STATE (as the exact snapshot does).

https://learn.microsoft.com/en-us/sql/t-sql/language-elements/save-transaction-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/system-dynamic-management-views/sys-dm-tran-database-transactions-transact-sql
"""

from __future__ import annotations

import contextlib
from decimal import Decimal

from cdc_assets.lsn import Lsn

from .dbapi import DbapiConnection, execute, fetch_value
from .errors import SqlServerError

__all__ = ["log_position"]

BEGIN_STATEMENT = "BEGIN TRANSACTION"
WATERMARK_SAVEPOINT = "SAVE TRANSACTION cdc_assets_watermark"
# the same statement as the exact snapshot's (snapshot.SNAPSHOT_LSN_QUERY)
TRANSACTION_LSN_QUERY = """
SELECT dt.database_transaction_begin_lsn
FROM sys.dm_tran_database_transactions AS dt
JOIN sys.dm_tran_current_transaction AS cur ON cur.transaction_id = dt.transaction_id
WHERE dt.database_id = DB_ID()
"""
ROLLBACK_STATEMENT = "ROLLBACK TRANSACTION"


def log_position(conn: DbapiConnection) -> Lsn:
    """An LSN above every commit already in the log and below every later one, read on
    ``conn`` (autocommit, no transaction open) with a savepoint in a transaction rolled back at
    once: no snapshot isolation, no table lock, no write to a user table."""
    execute(conn, BEGIN_STATEMENT).close()
    try:
        execute(conn, WATERMARK_SAVEPOINT).close()
        value = fetch_value(conn, TRANSACTION_LSN_QUERY)
    finally:
        with contextlib.suppress(Exception):  # the error being raised says more
            execute(conn, ROLLBACK_STATEMENT).close()
    if value is None:
        raise SqlServerError(
            "sys.dm_tran_database_transactions returned no log position for the watermark "
            "transaction.",
            hint="The login needs VIEW SERVER STATE to read log positions (snapshot watermarks).",
        )
    return Lsn.from_numeric(Decimal(value))
