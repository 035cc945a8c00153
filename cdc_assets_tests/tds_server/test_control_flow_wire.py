"""Scripts' control flow through each real client: PRINT and RAISERROR of severity 10 or less
arrive as informational messages (INFO tokens: pyodbc's ``cursor.messages``, python-tds's), a
TRY ... CATCH handles a THROW, and RAISERROR of severity 16 fails the call with its number."""

from __future__ import annotations

from typing import Any

import pytest


def _messages(cursor: Any) -> list[str]:
    """The texts of the messages the client collected (pyodbc: (state, text) with the driver's
    prefix; python-tds: (class, exception))."""
    raw = getattr(cursor, "_cursor", cursor)
    return [str(m[1]).rsplit("]", 1)[-1].split("', None")[0].strip("('") for m in raw.messages]


def test_print_raiserror_and_try_catch_over_the_wire(conn: Any) -> None:
    cursor = conn.cursor()
    cursor.execute("PRINT 'hello'; RAISERROR('note %d', 5, 1, 7); SELECT 1 AS one")
    assert sorted(_messages(cursor)) == ["hello", "note 7"]  # FreeTDS lists them in reverse
    assert [tuple(r) for r in cursor.fetchall()] == [(1,)]
    cursor.execute(
        "BEGIN TRY THROW 50010, 'x', 2 END TRY "
        "BEGIN CATCH SELECT ERROR_NUMBER(), ERROR_STATE(), ERROR_MESSAGE() END CATCH"
    )
    assert [tuple(r) for r in cursor.fetchall()] == [(50010, 2, "x")]
    with pytest.raises(Exception, match=r"bad y \(50000\)"):
        cursor.execute("RAISERROR('bad %s', 16, 4, 'y')")
