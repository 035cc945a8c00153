"""Every SQL Server type round-trips exactly and comes back as pyodbc's Python type."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_assets import emulator
from cdc_assets.emulator import Connection
from cdc_assets.emulator.values import types as T

from .conftest import enable_cdc

ALL_TYPES_DDL = """
CREATE TABLE [dbo].[all_types] (
    [id] int NOT NULL,
    [c_tinyint] tinyint, [c_smallint] smallint, [c_int] int, [c_bigint] bigint, [c_bit] bit,
    [c_dec] decimal(18,4), [c_num] numeric(38,10), [c_small_dec] decimal(9,2), [c_money] money,
    [c_smallmoney] smallmoney, [c_float] float, [c_real] real,
    [c_char] char(5), [c_varchar] varchar(20), [c_nchar] nchar(4), [c_nvarchar] nvarchar(max),
    [c_text] text, [c_ntext] ntext,
    [c_binary] binary(4), [c_varbinary] varbinary(max),
    [c_date] date, [c_time] time(7), [c_time0] time(0), [c_datetime] datetime,
    [c_datetime2] datetime2(7), [c_datetime2_3] datetime2(3), [c_smalldatetime] smalldatetime,
    [c_dto] datetimeoffset(7), [c_guid] uniqueidentifier, [c_xml] xml,
    CONSTRAINT [pk_all_types] PRIMARY KEY ([id])
)
"""

TZ = dt.timezone(dt.timedelta(hours=2, minutes=30))
GUID = uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff")

ROW = {
    "c_tinyint": 255,
    "c_smallint": -32768,
    "c_int": 2147483647,
    "c_bigint": -9223372036854775808,
    "c_bit": True,
    "c_dec": Decimal("12345678901234.5678"),
    "c_num": Decimal("1234567890123456789012345678.0123456789"),
    "c_small_dec": Decimal("-1234567.89"),
    "c_money": Decimal("922337203685477.5807"),
    "c_smallmoney": Decimal("-214748.3648"),
    "c_float": 1.0000000000000002,
    "c_real": 1.5,
    "c_char": "ab",
    "c_varchar": "hello",
    "c_nchar": "ÅÄ",
    "c_nvarchar": "naïve ☃ " * 100,
    "c_text": "text",
    "c_ntext": "ntext ✓",
    "c_binary": b"\x01\x02",
    "c_varbinary": bytes(range(256)) * 10,
    "c_date": dt.date(1, 1, 1),
    "c_time": dt.time(23, 59, 59, 999999),
    "c_time0": dt.time(12, 30, 15),
    "c_datetime": dt.datetime(2024, 2, 29, 13, 14, 15, 123000),
    "c_datetime2": dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    "c_datetime2_3": dt.datetime(2024, 1, 1, 0, 0, 0, 123000),
    "c_smalldatetime": dt.datetime(2024, 1, 1, 10, 30),
    "c_dto": dt.datetime(2024, 6, 1, 12, 0, 0, 500000, tzinfo=TZ),
    "c_guid": GUID,
    "c_xml": "<a>1</a>",
}

EXPECTED = {
    **ROW,
    "c_char": "ab   ",
    "c_nchar": "ÅÄ  ",
    "c_binary": b"\x01\x02\x00\x00",
    "c_guid": str(GUID).upper(),
}


def _insert_all(conn: Connection) -> None:
    conn.execute(ALL_TYPES_DDL)
    names = ", ".join(f"[{k}]" for k in ROW)
    marks = ", ".join("?" for _ in ROW)
    conn.execute(
        f"INSERT INTO [dbo].[all_types] ([id], {names}) VALUES (?, {marks})", 1, *ROW.values()
    )
    conn.execute("INSERT INTO [dbo].[all_types] ([id]) VALUES (?)", 2)


def test_every_type_round_trips_with_pyodbc_types(conn: Connection) -> None:
    _insert_all(conn)
    cursor = conn.execute("SELECT * FROM [dbo].[all_types] WHERE [id] = ?", 1)
    row = cursor.fetchone()
    names = [d[0] for d in cursor.description]
    values = dict(zip(names, row, strict=True))
    for name, expected in EXPECTED.items():
        got = values[name]
        assert got == expected, name
        assert type(got) is type(expected) or (name == "c_guid" and isinstance(got, str)), name
    assert values["c_dec"].as_tuple().exponent == -4
    assert values["c_money"].as_tuple().exponent == -4
    assert values["c_dto"].utcoffset() == dt.timedelta(hours=2, minutes=30)
    types = {d[0]: d[1] for d in cursor.description}
    assert types["c_bit"] is bool and types["c_num"] is Decimal and types["c_guid"] is str
    assert types["c_date"] is dt.date and types["c_time"] is dt.time
    assert types["c_dto"] is dt.datetime and types["c_varbinary"] is bytes
    nulls = conn.execute("SELECT * FROM [dbo].[all_types] WHERE [id] = 2").fetchone()
    assert list(nulls)[1:] == [None] * len(ROW)


def test_rounding_like_sql_server(conn: Connection) -> None:
    conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, d datetime, s smalldatetime, d2 datetime2(2), "
        "m decimal(5,2), r real, tm time(3))"
    )
    conn.execute(
        "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)",
        1,
        dt.datetime(2024, 1, 1, 0, 0, 0, 2000),
        dt.datetime(2024, 1, 1, 10, 29, 59, 999000),
        dt.datetime(2024, 1, 1, 0, 0, 0, 995000),
        Decimal("1.005"),
        0.1,
        dt.time(1, 2, 3, 456789),
    )
    row = conn.execute("SELECT d, s, d2, m, r, tm FROM t").fetchone()
    assert row[0] == dt.datetime(2024, 1, 1, 0, 0, 0, 3000)  # 1/300 s ticks: .003
    assert row[1] == dt.datetime(2024, 1, 1, 10, 30)
    assert row[2] == dt.datetime(2024, 1, 1, 0, 0, 1)
    assert row[3] == Decimal("1.01")
    assert row[4] == pytest.approx(0.1, rel=1e-7) and row[4] != 0.1  # float32
    assert row[5] == dt.time(1, 2, 3, 457000)


def test_overflow_truncation_and_conversion_errors(conn: Connection) -> None:
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, small tinyint, d decimal(4,2), s varchar(3))")
    with pytest.raises(emulator.DataError, match=r"\(8115\)"):
        conn.execute("INSERT INTO t (id, small) VALUES (?, ?)", 1, 256)
    with pytest.raises(emulator.DataError, match=r"\(8115\)"):
        conn.execute("INSERT INTO t (id, d) VALUES (?, ?)", 1, Decimal("100"))
    with pytest.raises(emulator.DataError, match=r"\(8152\)"):
        conn.execute("INSERT INTO t (id, s) VALUES (?, ?)", 1, "abcd")
    with pytest.raises(emulator.IntegrityError, match=r"\(515\)"):
        conn.execute("INSERT INTO t (small) VALUES (?)", 1)
    conn.execute("INSERT INTO t (id) VALUES (1)")
    with pytest.raises(emulator.IntegrityError, match=r"\(2627\)"):
        conn.execute("INSERT INTO t (id) VALUES (?)", 1)


def test_extremes_of_decimal_38_and_datetime2(conn: Connection) -> None:
    conn.execute("CREATE TABLE x (id int PRIMARY KEY, d decimal(38,4), t datetime2(3))")
    largest = Decimal("9" * 34 + ".9999")
    conn.execute(
        "INSERT INTO x (id, d) VALUES (?, ?), (?, ?)", 1, largest, 2, largest.copy_negate()
    )
    assert [r[0] for r in conn.execute("SELECT d FROM x ORDER BY d").fetchall()] == [
        largest.copy_negate(),
        largest,
    ]
    with pytest.raises(emulator.DataError, match=r"\(8115\)"):
        conn.execute("INSERT INTO x (id, d) VALUES (?, ?)", 3, Decimal("1" + "0" * 34))
    with pytest.raises(emulator.DataError, match=r"\(242\)"):  # rounds past 9999-12-31
        conn.execute("INSERT INTO x (id, t) VALUES (?, ?)", 4, dt.datetime.max)
    conn.execute("INSERT INTO x (id, t) VALUES (?, ?)", 5, dt.datetime(9999, 12, 31, 23, 59, 59))


def test_comparisons_and_order_use_sql_server_semantics(conn: Connection) -> None:
    conn.execute(
        "CREATE TABLE t (id int PRIMARY KEY, big decimal(38,6), ts datetime2(7), name varchar(10), "
        "code char(4), g uniqueidentifier)"
    )
    values = [
        Decimal("-12.5"),
        Decimal("-1.000001"),
        Decimal("0"),
        Decimal("3.25"),
        Decimal("1e20"),
    ]
    for i, value in enumerate(values):
        conn.execute(
            "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
            i,
            value,
            dt.datetime(2024, 1, 1) + dt.timedelta(days=i),
            f"Name{i}",
            f"c{i}",
            uuid.UUID(int=i),
        )
    ordered = [r[0] for r in conn.execute("SELECT big FROM t ORDER BY big DESC").fetchall()]
    assert ordered == sorted(values, reverse=True)
    assert conn.execute("SELECT COUNT(*) FROM t WHERE big > ?", Decimal("-2")).fetchone()[0] == 4
    assert conn.execute("SELECT MAX(big), MIN(ts) FROM t").fetchone() == (
        Decimal("100000000000000000000.000000"),
        dt.datetime(2024, 1, 1),
    )
    assert conn.execute("SELECT id FROM t WHERE ts >= ?", dt.datetime(2024, 1, 4)).fetchall() == [
        (3,),
        (4,),
    ]
    assert conn.execute("SELECT id FROM t WHERE name = 'NAME2'").fetchone()[0] == 2  # CI
    assert conn.execute("SELECT id FROM t WHERE code = ?", "c3").fetchone()[0] == 3  # padded
    assert (
        conn.execute("SELECT id FROM t WHERE g = ?", str(uuid.UUID(int=4)).lower()).fetchone()[0]
        == 4
    )
    assert conn.execute("SELECT id FROM t WHERE big BETWEEN 0 AND 4 ORDER BY id").fetchall() == [
        (2,),
        (3,),
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.decimals(min_value=Decimal("-1e12"), max_value=Decimal("1e12"), places=4),
        min_size=1,
        max_size=8,
    )
)
def test_decimal_storage_is_exact_and_ordered(values: list[Decimal]) -> None:
    for sql_type in (
        T.SqlType("decimal", precision=18, scale=4),
        T.SqlType("decimal", precision=15, scale=2),
    ):
        if sql_type.precision == 15:
            candidates = [v.quantize(Decimal("0.01")) for v in values]
        else:
            candidates = values
        encoded = [sql_type.encode(v) for v in candidates]
        back = [T.convert_stored(sql_type, e) for e in encoded]
        assert back == [Decimal(v).quantize(Decimal(1).scaleb(-sql_type.scale)) for v in candidates]
        assert sorted(range(len(encoded)), key=lambda i: (encoded[i], i)) == sorted(
            range(len(candidates)), key=lambda i: (candidates[i], i)
        )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.datetimes(min_value=dt.datetime(1753, 1, 1)), min_size=1, max_size=8))
def test_datetime2_storage_is_exact_and_ordered(values: list[dt.datetime]) -> None:
    sql_type = T.SqlType("datetime2", scale=7)
    encoded = [sql_type.encode(v) for v in values]
    assert [T.convert_stored(sql_type, e) for e in encoded] == values
    assert sorted(encoded) == [sql_type.encode(v) for v in sorted(values)]


def test_sys_columns_describe_types(conn: Connection) -> None:
    conn.execute(ALL_TYPES_DDL)
    rows = conn.execute(
        "SELECT c.name, ty.name, c.max_length, c.precision, c.scale FROM sys.columns AS c "
        "JOIN sys.types AS ty ON ty.user_type_id = c.user_type_id "
        "WHERE c.object_id = OBJECT_ID(N'dbo.all_types') ORDER BY c.column_id"
    ).fetchall()
    info = {r[0]: tuple(r[1:]) for r in rows}
    assert info["c_dec"] == ("decimal", 9, 18, 4)
    assert info["c_num"] == ("numeric", 17, 38, 10)
    assert info["c_money"] == ("money", 8, 19, 4)
    assert info["c_real"] == ("real", 4, 24, 0)
    assert info["c_nvarchar"] == ("nvarchar", -1, 0, 0)
    assert info["c_nchar"] == ("nchar", 8, 0, 0)
    assert info["c_datetime2"] == ("datetime2", 8, 27, 7)
    assert info["c_dto"] == ("datetimeoffset", 10, 34, 7)
    assert info["c_time0"] == ("time", 3, 8, 0)
    assert info["c_ntext"][0] == "ntext" and info["c_text"][0] == "text"


def test_change_rows_keep_types(conn: Connection, db_path: object) -> None:
    _insert_all(conn)
    enable_cdc(conn, "all_types")
    emulator.scan(db_path)  # type: ignore[arg-type]
    conn.execute("UPDATE [dbo].[all_types] SET [c_int] = ? WHERE [id] = ?", 5, 1)
    emulator.scan(db_path)  # type: ignore[arg-type]
    cursor = conn.execute("SELECT * FROM [cdc].[dbo_all_types_CT] WHERE [__$operation] = 4")
    names = [d[0] for d in cursor.description]
    values = dict(zip(names, cursor.fetchone(), strict=True))
    for name, expected in EXPECTED.items():
        if name != "c_int":
            assert values[name] == expected, name
    assert values["c_int"] == 5
