"""``sp_help``, ``sp_helpindex``, ``sp_server_info`` and ``fn_listextendedproperty`` through each
real client (pyodbc + ODBC Driver 18, pyodbc + FreeTDS, python-tds): the result sets SQL Server
documents, with their column names in order, and ``sp_help``'s several result sets reaching the
client as several sets (``nextset``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

TABLE_DDL = (
    "CREATE TABLE [dbo].[order lines] ([id] int NOT NULL, [line] int NOT NULL, "
    "[sku] varchar(20) NULL, [amount] decimal(10,2) NOT NULL, [note] nvarchar(max) NULL, "
    "[weight] float NULL, CONSTRAINT [pk_order_lines] PRIMARY KEY ([id], [line]))"
)
INDEX_DDL = "CREATE INDEX [ix_amount] ON [dbo].[order lines] ([amount] DESC, [sku])"

OBJECT = ["Name", "Owner", "Type", "Created_datetime"]
COLUMNS = [
    "Column_name",
    "Type",
    "Computed",
    "Length",
    "Prec",
    "Scale",
    "Nullable",
    "TrimTrailingBlanks",
    "FixedLenNullInSource",
    "Collation",
]
IDENTITY = ["Identity", "Seed", "Increment", "Not For Replication"]
INDEXES = ["index_name", "index_description", "index_keys"]
CONSTRAINTS = [
    "constraint_type",
    "constraint_name",
    "delete_action",
    "update_action",
    "status_enabled",
    "status_for_replication",
    "constraint_keys",
]


def result_sets(cursor: Any) -> list[tuple[list[str], list[tuple[Any, ...]]]]:
    """Every result set of the cursor's statement: (column names, rows)."""
    sets = []
    while True:
        if cursor.description is not None:
            names = [d[0] for d in cursor.description]
            sets.append((names, [tuple(r) for r in cursor.fetchall()]))
        if not cursor.nextset():
            return sets


@pytest.fixture
def lines(conn: Any) -> Any:
    conn.execute(TABLE_DDL)
    conn.execute(INDEX_DDL)
    return conn


def test_sp_help_of_a_table_returns_sql_servers_result_sets(lines: Any) -> None:
    sets = result_sets(lines.cursor().execute("EXEC sp_help N'dbo.[order lines]'"))
    assert [names for names, _ in sets] == [
        OBJECT,
        COLUMNS,
        IDENTITY,
        ["RowGuidCol"],
        ["Data_located_on_filegroup"],
        INDEXES,
        CONSTRAINTS,
    ]
    (name, owner, kind, created), *more = sets[0][1]
    assert (name, owner, kind, more) == ("order lines", "dbo", "user table", [])
    assert created is not None and created.year >= 2024
    assert sets[1][1] == [
        ("id", "int", "no", 4, "10   ", "0    ", "no", "(n/a)", "(n/a)", None),
        ("line", "int", "no", 4, "10   ", "0    ", "no", "(n/a)", "(n/a)", None),
        ("sku", "varchar", "no", 20, "     ", "     ", "yes", "no", "yes",
         "SQL_Latin1_General_CP1_CI_AS"),
        ("amount", "decimal", "no", 9, "10   ", "2    ", "no", "(n/a)", "(n/a)", None),
        ("note", "nvarchar", "no", -1, "     ", "     ", "yes", "(n/a)", "(n/a)",
         "SQL_Latin1_General_CP1_CI_AS"),
        ("weight", "float", "no", 8, "53   ", None, "yes", "(n/a)", "(n/a)", None),
    ]  # fmt: skip
    assert sets[2][1] == [("No identity column defined.", None, None, None)]
    assert sets[3][1] == [("No rowguidcol column defined.",)]
    assert sets[4][1] == [("PRIMARY",)]
    assert sets[5][1] == [
        ("ix_amount", "nonclustered located on PRIMARY", "amount(-), sku"),
        ("pk_order_lines", "clustered, unique, primary key located on PRIMARY", "id, line"),
    ]
    assert sets[6][1] == [
        ("PRIMARY KEY (clustered)", "pk_order_lines", "(n/a)", "(n/a)", "(n/a)", "(n/a)",
         "id, line"),
    ]  # fmt: skip


def test_sp_help_of_an_identity_table_and_of_a_heap(conn: Any) -> None:
    conn.execute("CREATE TABLE [dbo].[counters] ([id] int IDENTITY(1,1) PRIMARY KEY, [c] char(3))")
    conn.execute("CREATE TABLE [dbo].[heap] ([a] int NULL)")
    sets = result_sets(conn.cursor().execute("EXEC sys.sp_help @objname = N'counters'"))
    assert sets[2] == (IDENTITY, [("id", Decimal(1), Decimal(1), 0)])
    assert sets[1][1][1] == (
        "c", "char", "no", 3, "     ", "     ", "yes", "no", "yes", "SQL_Latin1_General_CP1_CI_AS",
    )  # fmt: skip
    # a table without index or constraint: SQL Server only prints messages for those two
    heap = result_sets(conn.cursor().execute("EXEC sp_help 'heap'"))
    assert [names for names, _ in heap] == [
        OBJECT,
        COLUMNS,
        IDENTITY,
        ["RowGuidCol"],
        ["Data_located_on_filegroup"],
    ]


def test_sp_help_without_a_name_lists_objects_then_user_types(lines: Any) -> None:
    sets = result_sets(lines.cursor().execute("EXEC sp_help"))
    assert [names for names, _ in sets] == [
        ["Name", "Owner", "Object_type"],
        [
            "User_type",
            "Storage_type",
            "Length",
            "Prec",
            "Scale",
            "Nullable",
            "Default_name",
            "Rule_name",
            "Collation",
        ],
    ]
    assert sets[0][1] == [
        ("order lines", "dbo", "user table"),
        ("pk_order_lines", "dbo", "primary key cns"),
    ]
    assert sets[1][1] == []


def test_sp_help_of_an_unknown_object_is_error_15009(conn: Any) -> None:
    with pytest.raises(Exception, match=r"The object 'nope' does not exist.*15009"):
        result_sets(conn.cursor().execute("EXEC sp_help N'nope'"))
    assert [tuple(r) for r in conn.execute("SELECT 1").fetchall()] == [(1,)]  # still usable


def test_sp_helpindex(lines: Any) -> None:
    sets = result_sets(lines.cursor().execute("EXEC sp_helpindex N'[dbo].[order lines]'"))
    assert sets == [
        (
            INDEXES,
            [
                ("ix_amount", "nonclustered located on PRIMARY", "amount(-), sku"),
                (
                    "pk_order_lines",
                    "clustered, unique, primary key located on PRIMARY",
                    "id, line",
                ),
            ],
        )
    ]
    lines.execute("CREATE TABLE [dbo].[heap] ([a] int NULL)")
    assert result_sets(lines.cursor().execute("EXEC sp_helpindex N'heap'")) == []


def test_sp_server_info(conn: Any) -> None:
    ((names, rows),) = result_sets(conn.cursor().execute("EXEC sp_server_info"))
    assert names == ["attribute_id", "attribute_name", "attribute_value"]
    by_id = {r[0]: (r[1], r[2]) for r in rows}
    assert [r[0] for r in rows] == sorted(by_id)
    assert by_id[1] == ("DBMS_NAME", "Microsoft SQL Server")
    version = conn.execute("SELECT CAST(SERVERPROPERTY('ProductVersion') AS nvarchar(128))")
    ((product_version,),) = version.fetchall()
    assert by_id[2] == ("DBMS_VER", f"Microsoft SQL Server 2022 - {product_version}")
    assert by_id[18][0] == "COLLATION_SEQ" and by_id[500][0] == "SYS_SPROC_VERSION"
    assert {1, 2, 10, 11, 16, 17, 19, 20, 22, 100, 101, 113, 500} <= set(by_id)
    ((_, one),) = result_sets(conn.cursor().execute("EXEC sp_server_info @attribute_id = 2"))
    assert one == [(2, "DBMS_VER", by_id[2][1])]


@pytest.mark.parametrize("prefix", ["", "sys."])
def test_fn_listextendedproperty_is_empty(lines: Any, prefix: str) -> None:
    cursor = lines.cursor().execute(
        f"SELECT * FROM {prefix}fn_listextendedproperty(NULL, 'schema', 'dbo', 'table', ?, "
        "NULL, NULL)",
        "order lines",
    )
    assert [d[0] for d in cursor.description] == ["objtype", "objname", "name", "value"]
    assert cursor.fetchall() == []
    cursor.close()
    count = lines.execute(
        f"SELECT COUNT(*) FROM {prefix}fn_listextendedproperty(NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL) AS p WHERE p.name = N'MS_Description'"
    )
    assert [tuple(r) for r in count.fetchall()] == [(0,)]
