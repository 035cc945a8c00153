"""Error texts through each real client: what the emulator does not run is named by the user's
own T-SQL, with SQL Server's error number where one fits (2812, 102), and the connection goes on."""

from __future__ import annotations

from typing import Any

import pytest

from cdc_assets_tests.emulator.test_error_texts import internal_names


def _error(conn: Any, statement: str, *params: Any) -> str:
    with pytest.raises(Exception) as info:
        conn.cursor().execute(statement, *params).fetchall()
    return str(info.value)


def test_errors_quote_the_users_text_over_the_wire(conn: Any) -> None:
    message = _error(conn, "SELECT SUSER_SNAME() AS who, FORMAT(1, 'N') AS n")
    assert "does not support the expression 'FORMAT(1, 'N')'" in message
    assert "in 'SELECT SUSER_SNAME() AS who, FORMAT(1, 'N') AS n'" in message
    assert internal_names(message) == set()
    message = _error(conn, "SELECT NEXT VALUE FOR seq WHERE 1 = ?", 1)
    assert (
        "'NEXT VALUE FOR seq'" in message and "'SELECT NEXT VALUE FOR seq WHERE 1 = ?'" in message
    )
    assert internal_names(message) == set()
    assert [tuple(r) for r in conn.execute("SELECT SUSER_SNAME()").fetchall()] != []


def test_sql_server_numbers_over_the_wire(conn: Any) -> None:
    message = _error(conn, "EXEC sp_no_such_thing")
    assert "Could not find stored procedure 'sp_no_such_thing'." in message and "2812" in message
    message = _error(conn, "SELECT 1 +")
    assert "Incorrect syntax near '+' in 'SELECT 1 +'." in message and "102" in message
    assert [tuple(r) for r in conn.execute("SELECT 1").fetchall()] == [(1,)]
