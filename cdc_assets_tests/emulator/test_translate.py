"""T-SQL translation: the query shapes that work, the errors SQL Server gives, and refusals."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest

from cdc_assets import emulator
from cdc_assets.emulator import Connection


@pytest.fixture
def shop(conn: Connection) -> Connection:
    conn.execute(
        "CREATE TABLE [dbo].[customers] ([id] int NOT NULL PRIMARY KEY, [name] nvarchar(30) NOT "
        "NULL, "
        "[city] varchar(20) NULL, [joined] date NULL)"
    )
    conn.execute(
        "CREATE TABLE [dbo].[sales] ([id] int NOT NULL PRIMARY KEY, [customer_id] int NOT NULL, "
        "[amount] decimal(10,2) NOT NULL, [at] datetime2(3) NOT NULL DEFAULT SYSDATETIME(), "
        "[ref] uniqueidentifier NOT NULL DEFAULT NEWID(), [flag] bit NOT NULL DEFAULT 0)"
    )
    conn.execute(
        "INSERT INTO [dbo].[customers] VALUES (1, N'Ann', 'Oslo', '2020-01-01'), "
        "(2, N'Bob', 'Rome', NULL), (3, N'Cy', NULL, '2021-05-05')"
    )
    conn.execute(
        "INSERT INTO [dbo].[sales] ([id], [customer_id], [amount]) VALUES "
        "(1, 1, 10.50), (2, 1, 4.25), (3, 2, 100), (4, 3, 0.10)"
    )
    return conn


def test_joins_groups_and_subqueries(shop: Connection) -> None:
    rows = shop.execute(
        "SELECT c.name, COUNT(*) AS n, SUM(s.amount) AS total, MAX(s.amount) AS top_sale "
        "FROM dbo.customers AS c JOIN dbo.sales s ON s.customer_id = c.id "
        "GROUP BY c.name HAVING COUNT(*) >= 1 ORDER BY total DESC"
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        ("Bob", 1, Decimal("100.00"), Decimal("100.00")),
        ("Ann", 2, Decimal("14.75"), Decimal("10.50")),
        ("Cy", 1, Decimal("0.10"), Decimal("0.10")),
    ]
    assert shop.execute(
        "SELECT name FROM customers WHERE id IN (SELECT customer_id FROM sales WHERE amount > ?) "
        "ORDER BY name",
        Decimal("5"),
    ).fetchall() == [("Ann",), ("Bob",)]
    assert shop.execute(
        "SELECT c.name, (SELECT COUNT(*) FROM sales AS s WHERE s.customer_id = c.id) AS n "
        "FROM customers AS c WHERE EXISTS (SELECT 1 FROM sales AS s WHERE s.customer_id = c.id "
        "AND s.amount < 1)"
    ).fetchall() == [("Cy", 1)]
    rows = shop.execute(
        "WITH big AS (SELECT customer_id, amount FROM sales WHERE amount >= 10) "
        "SELECT c.name, b.amount FROM big AS b LEFT JOIN customers AS c ON c.id = b.customer_id "
        "ORDER BY b.amount"
    ).fetchall()
    assert [tuple(r) for r in rows] == [("Ann", Decimal("10.50")), ("Bob", Decimal("100.00"))]
    assert shop.execute(
        "SELECT name FROM customers WHERE city IS NULL UNION ALL SELECT N'x' ORDER BY 1"
    ).fetchall() == [("Cy",), ("x",)]


def test_expressions(shop: Connection) -> None:
    row = shop.execute(
        "SELECT TOP (1) name + N'!' AS shout, LEN(name) AS n, UPPER(city) AS city, "
        "ISNULL(city, 'none') AS c2, CASE WHEN id > 1 THEN 'big' ELSE 'small' END AS size, "
        "IIF(id = 1, 1, 0) AS first, CAST(id AS nvarchar(5)) AS txt, CAST(? AS date) AS d "
        "FROM customers WHERE name LIKE N'A%' AND joined >= '2019-12-31' ORDER BY id",
        "2024-02-03",
    ).fetchone()
    assert tuple(row) == ("Ann!", 3, "OSLO", "Oslo", "small", 1, "1", dt.date(2024, 2, 3))
    page = shop.execute(
        "SELECT id FROM sales ORDER BY id OFFSET ? ROWS FETCH NEXT ? ROWS ONLY", 1, 2
    ).fetchall()
    assert page == [(2,), (3,)]
    assert shop.execute("SELECT TOP (?) id FROM sales ORDER BY amount DESC", 2).fetchall() == [
        (3,),
        (1,),
    ]
    ranked = shop.execute(
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn "
        "FROM sales ORDER BY id"
    ).fetchall()
    assert [tuple(r) for r in ranked] == [(1, 1), (2, 2), (3, 1), (4, 1)]
    sale = shop.execute("SELECT at, ref, flag FROM sales WHERE id = 1").fetchone()
    assert isinstance(sale.at, dt.datetime) and uuid.UUID(sale.ref) and sale.flag is False
    assert shop.execute(
        "SELECT DB_NAME(), CASE WHEN OBJECT_ID(N'dbo.sales') > OBJECT_ID(N'customers') THEN 1 END"
    ).fetchone() == (
        "salesdb",
        1,
    )
    start, end = (
        dt.datetime(2024, 1, 1, 23, 59, 59, 900000),
        dt.datetime(2024, 1, 2, 0, 0, 0, 100000),
    )
    assert shop.execute(
        "SELECT DATEDIFF(SECOND, ?, ?), DATEDIFF(MINUTE, ?, ?), DATEDIFF(DAY, ?, ?), "
        "QUOTENAME(N'a]b'), SCHEMA_NAME(1)",
        start,
        end,
        start,
        end,
        start,
        end,
    ).fetchone() == (1, 1, 1, "[a]]b]", "dbo")
    assert shop.execute(
        "SELECT OBJECT_NAME(OBJECT_ID(N'dbo.sales')), SCHEMA_ID(N'dbo'), SCHEMA_ID(), "
        "SCHEMA_NAME(), SCHEMA_NAME(SCHEMA_ID(N'sys'))"
    ).fetchone() == ("sales", 1, 1, "dbo", "sys")
    shop.execute("UPDATE sales SET amount = amount * 1.1, flag = 1 WHERE customer_id = ?", 1)
    assert shop.execute("SELECT amount FROM sales WHERE id = 1").fetchone()[0] == Decimal("11.55")


def test_sql_server_errors(shop: Connection) -> None:
    with pytest.raises(emulator.ProgrammingError, match=r"\(208\)"):
        shop.execute("SELECT * FROM dbo.nothing")
    with pytest.raises(emulator.ProgrammingError, match=r"\(207\)"):
        shop.execute("SELECT nope FROM customers")
    with pytest.raises(emulator.ProgrammingError, match=r"\(209\)"):
        shop.execute("SELECT id FROM customers JOIN sales ON sales.customer_id = customers.id")
    with pytest.raises(emulator.ProgrammingError, match=r"\(2714\)"):
        shop.execute("CREATE TABLE customers (id int)")
    with pytest.raises(emulator.ProgrammingError, match=r"\(102\)"):
        shop.execute("SELEC 1")


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT * FROM customers CROSS APPLY (SELECT 1 AS x) AS a",
        "SELECT DATEADD(nanosecond, 1, joined) FROM customers",
        "SELECT joined + 1 FROM customers",
        "DECLARE @c CURSOR",
        "ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON",
        "MERGE customers AS t USING sales AS s ON t.id = s.id WHEN MATCHED THEN DELETE;",
        "CREATE TABLE g (id int PRIMARY KEY, shape geography)",
        "SELECT TOP 10 PERCENT id FROM customers",
        "UPDATE c SET name = N'x' FROM customers AS c JOIN sales AS s ON s.customer_id = c.id",
        "SELECT id INTO copy_of_customers FROM customers",
        "SELECT STRING_AGG(name, N',') FROM customers",
    ],
)
def test_unsupported_constructs_are_refused(shop: Connection, statement: str) -> None:
    with pytest.raises(emulator.NotSupportedError) as info:
        shop.execute(statement)
    assert info.value.args[0] == "0A000" and "does not support" in info.value.args[1]


def test_identity_schema_and_ddl(conn: Connection) -> None:
    conn.execute("CREATE SCHEMA sales")
    conn.execute(
        "CREATE TABLE [sales].[events] ([id] bigint IDENTITY(1,1) NOT NULL PRIMARY KEY, "
        "[kind] varchar(10) NOT NULL, [at] datetime NOT NULL DEFAULT GETDATE())"
    )
    conn.execute("INSERT INTO [sales].[events] ([kind]) VALUES ('a'), ('b')")
    assert conn.execute("SELECT id, kind FROM sales.events ORDER BY id").fetchall() == [
        (1, "a"),
        (2, "b"),
    ]
    with pytest.raises(emulator.ProgrammingError, match=r"\(544\)"):
        conn.execute("INSERT INTO [sales].[events] ([id], [kind]) VALUES (5, 'c')")
    conn.execute("ALTER TABLE [sales].[events] ADD [note] nvarchar(10) NOT NULL DEFAULT N'-'")
    assert conn.execute("SELECT note FROM sales.events WHERE id = 1").fetchone()[0] == "-"
    conn.execute("CREATE TABLE [dbo].[empty] ([id] int NOT NULL PRIMARY KEY)")
    conn.execute("ALTER TABLE [dbo].[empty] ADD [must] int NOT NULL")
    with pytest.raises(emulator.IntegrityError, match=r"\(515\)"):
        conn.execute("INSERT INTO [dbo].[empty] ([id]) VALUES (1)")
    with pytest.raises(emulator.ProgrammingError, match=r"\(4901\)"):
        conn.execute("ALTER TABLE [sales].[events] ADD [must] int NOT NULL")
    with pytest.raises(emulator.ProgrammingError, match=r"\(5074\)"):
        conn.execute("ALTER TABLE [dbo].[empty] DROP COLUMN [id]")
    conn.execute("CREATE NONCLUSTERED INDEX [ix_kind] ON [sales].[events] ([kind] ASC, [at] DESC)")
    conn.execute("DROP INDEX [ix_kind] ON [sales].[events]")
    conn.execute("DROP TABLE IF EXISTS [dbo].[never]")
    conn.execute("TRUNCATE TABLE [sales].[events]")
    assert conn.execute("SELECT COUNT(*) FROM sales.events").fetchone()[0] == 0


def test_statement_cache_follows_schema_changes(conn: Connection) -> None:
    conn.execute("CREATE TABLE t (a int)")
    conn.execute("INSERT INTO t VALUES (1)")
    assert conn.execute("SELECT * FROM t").description[0][0] == "a"
    conn.execute("ALTER TABLE t ADD b nvarchar(5) NULL")
    assert [d[0] for d in conn.execute("SELECT * FROM t").description] == ["a", "b"]
    conn.execute("BEGIN TRAN")
    conn.execute("ALTER TABLE t ADD c int NULL")
    conn.execute("ROLLBACK")
    assert [d[0] for d in conn.execute("SELECT * FROM t").description] == ["a", "b"]
