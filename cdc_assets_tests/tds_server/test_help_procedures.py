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


KEYED_DDL = (
    "CREATE TABLE [dbo].[keyed] ([id] int NOT NULL, [code] varchar(10) NOT NULL, "
    "[alt] int NULL UNIQUE, [qty] int NOT NULL CONSTRAINT [df_keyed_qty] DEFAULT 0, "
    "[label] nvarchar(20) NULL DEFAULT N'new', CONSTRAINT [pk_keyed] PRIMARY KEY ([id]), "
    "CONSTRAINT [uq_keyed_code] UNIQUE ([code]))"
)


def rows(conn: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in conn.execute(sql).fetchall()]


@pytest.fixture
def keyed(conn: Any) -> Any:
    """A table with a primary key, a named and an unnamed UNIQUE constraint, an index made by
    CREATE INDEX and two DEFAULTs (one named, one not)."""
    conn.execute(KEYED_DDL)
    conn.execute("CREATE INDEX [ix_keyed_label] ON [dbo].[keyed] ([label] DESC)")
    return conn


def test_sp_helpindex_names_what_sys_indexes_names(keyed: Any) -> None:
    listed = rows(
        keyed,
        "SELECT name FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.keyed') AND index_id > 0",
    )
    ((unnamed,),) = rows(
        keyed,
        "SELECT name FROM sys.key_constraints WHERE parent_object_id = OBJECT_ID(N'dbo.keyed') "
        "AND is_system_named = 1",
    )
    assert unnamed.startswith("UQ__keyed__")
    ((names, found),) = result_sets(keyed.cursor().execute("EXEC sp_helpindex N'dbo.keyed'"))
    assert names == INDEXES
    assert sorted(name for name, _, _ in found) == sorted(name for (name,) in listed)
    unique_key = "nonclustered, unique, unique key located on PRIMARY"
    assert found == [
        ("ix_keyed_label", "nonclustered located on PRIMARY", "label(-)"),
        ("pk_keyed", "clustered, unique, primary key located on PRIMARY", "id"),
        (unnamed, unique_key, "alt"),
        ("uq_keyed_code", unique_key, "code"),
    ]


@pytest.mark.parametrize("procedure", ["sp_statistics", "sp_statistics_100"])
def test_sp_statistics_lists_what_sys_indexes_lists(keyed: Any, procedure: str) -> None:
    """Every index of sys.indexes, UNIQUE constraints included, with its keys' order and
    direction from sys.index_columns (COLLATION 'D' for a descending key)."""
    listed = rows(
        keyed,
        "SELECT CAST(1 - i.is_unique AS smallint) AS non_unique, i.name AS index_name, "
        "CASE WHEN i.index_id = 1 THEN 1 ELSE 3 END AS type, ic.key_ordinal AS seq, "
        "c.name AS column_name, CASE WHEN ic.is_descending_key = 1 THEN 'D' ELSE 'A' END "
        "AS collation "
        "FROM sys.indexes AS i JOIN sys.index_columns AS ic "
        "ON ic.object_id = i.object_id AND ic.index_id = i.index_id "
        "JOIN sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id "
        "WHERE i.object_id = OBJECT_ID(N'dbo.keyed') "
        "ORDER BY 1 - i.is_unique, CASE WHEN i.index_id = 1 THEN 1 ELSE 3 END, i.name, "
        "ic.key_ordinal",
    )
    ((unnamed,),) = rows(
        keyed,
        "SELECT name FROM sys.key_constraints WHERE parent_object_id = OBJECT_ID(N'dbo.keyed') "
        "AND is_system_named = 1",
    )
    ((_, found),) = result_sets(keyed.cursor().execute(f"EXEC {procedure} N'keyed'"))
    table, *indexes = found
    assert table[3:10] == (None, None, None, 0, None, None, None)
    # NON_UNIQUE, INDEX_NAME, TYPE, SEQ_IN_INDEX, COLUMN_NAME, COLLATION
    assert [(r[3], *r[5:10]) for r in indexes] == listed
    assert listed == [
        (0, "pk_keyed", 1, 1, "id", "A"),
        (0, unnamed, 3, 1, "alt", "A"),
        (0, "uq_keyed_code", 3, 1, "code", "A"),
        (1, "ix_keyed_label", 3, 1, "label", "D"),
    ]
    ((_, unique),) = result_sets(
        keyed.cursor().execute(f"EXEC {procedure} N'keyed', @is_unique = 'Y'")
    )
    assert [r[5] for r in unique[1:]] == ["pk_keyed", unnamed, "uq_keyed_code"]


def test_sp_help_constraints_are_sys_key_and_default_constraints(keyed: Any) -> None:
    listed = rows(
        keyed,
        "SELECT name FROM sys.key_constraints WHERE parent_object_id = OBJECT_ID(N'dbo.keyed') "
        "UNION ALL SELECT name FROM sys.default_constraints "
        "WHERE parent_object_id = OBJECT_ID(N'dbo.keyed')",
    )
    system_named = dict(
        rows(
            keyed,
            "SELECT type, name FROM sys.objects WHERE parent_object_id = OBJECT_ID(N'dbo.keyed') "
            "AND name IN (SELECT name FROM sys.key_constraints WHERE is_system_named = 1 "
            "UNION ALL SELECT name FROM sys.default_constraints WHERE is_system_named = 1)",
        )
    )
    unique, default = system_named["UQ"], system_named["D "]
    assert unique.startswith("UQ__keyed__") and default.startswith("DF__keyed__label__")
    sets = result_sets(keyed.cursor().execute("EXEC sp_help N'keyed'"))
    assert [names for names, _ in sets][-2:] == [INDEXES, CONSTRAINTS]
    found = sets[-1][1]
    assert sorted(r[1] for r in found) == sorted(name for (name,) in listed)
    na = ("(n/a)",) * 4
    assert found == [
        ("DEFAULT on column label", default, *na, "(N'new')"),
        ("DEFAULT on column qty", "df_keyed_qty", *na, "((0))"),
        ("PRIMARY KEY (clustered)", "pk_keyed", *na, "id"),
        ("UNIQUE (non-clustered)", unique, *na, "alt"),
        ("UNIQUE (non-clustered)", "uq_keyed_code", *na, "code"),
    ]
    # the index set is sp_helpindex's
    assert sets[-2][1] == result_sets(keyed.cursor().execute("EXEC sp_helpindex N'keyed'"))[0][1]
    # sp_help without a name lists the constraints as objects of their kind
    listing = result_sets(keyed.cursor().execute("EXEC sp_help"))[0][1]
    assert listing == [
        ("keyed", "dbo", "user table"),
        (unique, "dbo", "unique key cns"),
        ("uq_keyed_code", "dbo", "unique key cns"),
        ("pk_keyed", "dbo", "primary key cns"),
        (default, "dbo", "default (maybe cns)"),
        ("df_keyed_qty", "dbo", "default (maybe cns)"),
    ]


def test_dropped_index_and_column_leave_sp_help_and_the_views_alike(keyed: Any) -> None:
    keyed.execute("DROP INDEX [ix_keyed_label] ON [dbo].[keyed]")
    keyed.execute("ALTER TABLE [dbo].[keyed] DROP COLUMN [label]")
    sets = result_sets(keyed.cursor().execute("EXEC sp_help N'dbo.keyed'"))
    assert [r[0] for r in sets[-2][1]] == sorted(
        (name for (name,) in rows(
            keyed,
            "SELECT name FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.keyed') "
            "AND index_id > 0",
        )),
        key=str.lower,
    )  # fmt: skip
    assert "ix_keyed_label" not in [r[0] for r in sets[-2][1]]
    assert [r[:2] for r in sets[-1][1] if r[0].startswith("DEFAULT")] == [
        ("DEFAULT on column qty", "df_keyed_qty")
    ]


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
