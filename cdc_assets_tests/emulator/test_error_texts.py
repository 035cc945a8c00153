"""Errors for what the emulator does not run quote the user's own T-SQL, never the parser's
internals (sqlglot's node classes such as ``CurrentUser`` or ``PLACEHOLDER``, its regenerated
SQL, the ``@__p<n>`` markers that stand for ``?``), and carry SQL Server's error number where one
fits: 102 for a statement that does not parse, 2812 for an unknown procedure."""

from __future__ import annotations

import re

import pytest
from sqlglot import exp

from cdc_assets import emulator
from cdc_assets.emulator import Connection

TABLE = "CREATE TABLE [dbo].[t] ([id] int NOT NULL PRIMARY KEY, [name] nvarchar(20) NULL)"

# every sqlglot class name written in CamelCase (CurrentUser, NumberToStr, OpenJSON, ...) and the
# upper-case names the old messages printed
INTERNAL = {
    cls.__name__
    for cls in vars(exp).values()
    if isinstance(cls, type)
    and issubclass(cls, exp.Expression)
    and re.fullmatch(r"[A-Z][a-z0-9]+[A-Z]\w*", cls.__name__)
} | {"IFBLOCK", "PLACEHOLDER", "PARAMETER", "ANONYMOUS", "RETURNING", "TABLES", "__p0"}


def internal_names(message: str) -> set[str]:
    return {name for name in INTERNAL if re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", message)}


# (statement, parameters, the part of it the message quotes besides the statement itself)
UNSUPPORTED = [
    ("SELECT SUSER_SNAME(), SESSION_USER", (), "'SESSION_USER'"),
    ("SELECT FORMAT(1, 'N')", (), "'FORMAT(1, 'N')'"),
    ("SELECT STRING_AGG([name], N',') FROM t", (), "'STRING_AGG([name], N',')'"),
    ("SELECT DATEADD(nanosecond, 1, GETDATE())", (), "'DATEADD(nanosecond, 1, GETDATE())'"),
    ("SELECT [name] COLLATE Japanese_Unicode FROM t", (), "'Japanese_Unicode'"),
    ("SELECT NEXT VALUE FOR seq", (), "'NEXT VALUE FOR seq'"),
    ("SELECT * FROM OPENJSON(N'[]')", (), "OPENJSON"),
    ("SELECT * FROM ?", ("t",), "(?)"),
    ("?", (1,), ""),
    ("SELECT ? + ?", (1, 2), "'? + ?'"),
    ("UPDATE t SET [name] = N'x' OUTPUT inserted.id WHERE id = 1", (), "'OUTPUT inserted.id'"),
    ("DELETE TOP (1) FROM t", (), "'TOP (1)'"),
    ("SELECT id FROM t GROUP BY ROLLUP (id)", (), "'ROLLUP (id)'"),
    ("SELECT id FROM t FOR XML AUTO", (), "FOR XML"),
    ("SELECT * FROM t PIVOT (MAX([name]) FOR id IN ([1])) AS p", (), "PIVOT"),
    ("SELECT * FROM t TABLESAMPLE (10 PERCENT)", (), "'TABLESAMPLE (10 PERCENT)'"),
    ("CREATE TABLE u (a int CHECK (a > 0))", (), "'CHECK (a > 0)'"),
    ("ALTER TABLE t ALTER COLUMN [name] nvarchar(40)", (), "'ALTER COLUMN [name] nvarchar(40)'"),
]


@pytest.fixture
def table(conn: Connection) -> Connection:
    conn.execute(TABLE)
    return conn


@pytest.mark.parametrize(("statement", "params", "part"), UNSUPPORTED)
def test_unsupported_statements_quote_the_users_text(
    table: Connection, statement: str, params: tuple[object, ...], part: str
) -> None:
    with pytest.raises(emulator.NotSupportedError) as info:
        table.execute(statement, *params)
    sqlstate, message = info.value.args
    assert sqlstate == "0A000"
    assert f" in '{statement}'." in message  # the whole statement, as written
    assert part in message
    assert internal_names(message) == set()
    assert not re.search(r"\(\d+\) \(SQLExecDirectW\)$", message)  # no SQL Server number


def test_an_unknown_procedure_is_error_2812(table: Connection) -> None:
    with pytest.raises(emulator.ProgrammingError) as info:
        table.execute("EXEC sp_no_such_thing @x = 1")
    assert info.value.number == 2812
    assert "Could not find stored procedure 'sp_no_such_thing'. (2812)" in info.value.args[1]
    with pytest.raises(emulator.ProgrammingError, match=r"'dbo\.sp_help'\. \(2812\)"):
        table.execute("EXEC dbo.sp_help")


@pytest.mark.parametrize(
    ("statement", "near"),
    [
        ("SELECT [name] FROM t WHERE (id = 1", "1"),
        ("SELECT 1 +", "+"),
        ("INSERT INTO t EXEC sp_who", "EXEC"),
        ("SELECT CAST(? AS ?)", ")"),
    ],
)
def test_a_statement_that_does_not_parse_is_error_102(
    table: Connection, statement: str, near: str
) -> None:
    params = (1,) * statement.count("?")
    with pytest.raises(emulator.ProgrammingError) as info:
        table.execute(statement, *params)
    assert info.value.number == 102
    message = info.value.args[1]
    assert f"Incorrect syntax near '{near}' in '{statement}'. (102)" in message
    assert internal_names(message) == set() and "sqlglot" not in message


def test_long_statements_are_cut_in_the_message(table: Connection) -> None:
    columns = ", ".join(f"[name] AS c{i}" for i in range(30))
    statement = f"SELECT {columns}, FORMAT(id, 'N') FROM t"
    with pytest.raises(emulator.NotSupportedError) as info:
        table.execute(statement)
    message = info.value.args[1]
    assert f" in '{statement[:60]}" in message and "...'." in message
    assert "'FORMAT(id, 'N')'" in message
