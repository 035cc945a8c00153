"""The demo source's tables, as data: column names, SQL Server types, keys, parent links.

The workload generator (:mod:`.workload`), the CLI, the benchmark and the tests all build on
:data:`DEMO_TABLES`. Together the tables use every SQL Server type the project maps (integers,
bit, decimal/numeric, money, float/real, fixed and variable strings with and without unicode and
``max``, text/ntext, binary, date/time types, datetimeoffset, uniqueidentifier, xml), a composite
primary key, a keyless table (CDC without net changes) and identifiers that need quoting
(``[dbo].[order lines]``, ``[line no]``, ``[unit price]``).

Everything here is plain T-SQL text and Python values: no emulator internals, so the same
definitions create the demo on a real SQL Server.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cdc_assets.sqlserver.cdc_admin import Statement, enable_table_statement
from cdc_assets.sqlserver.quoting import quote_name  # the one QUOTENAME of the project

_TYPE_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(?:\(\s*([^)]*)\s*\))?\s*$")

INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
INTEGER_RANGES: dict[str, tuple[int, int]] = {
    "tinyint": (0, 255),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class ColumnDef:
    """One column: its name, its SQL Server type as written in DDL, nullability, a value hint.

    ``hint`` steers the value generator towards realistic data (``"name"``, ``"email"``,
    ``"country"``, ``"status"``, ``"sku"``, ``"quantity"``, or ``"ref:<schema>.<table>"`` for a
    value taken from that table's first key column); it never changes the type.
    """

    name: str
    type: str
    nullable: bool = True
    hint: str | None = None

    @property
    def base_type(self) -> str:
        """The type name without arguments, lower case: ``decimal(18,4)`` -> ``decimal``."""
        return self._parsed()[0]

    @property
    def type_args(self) -> tuple[str, ...]:
        """The type's arguments as written, lower case: ``decimal(18,4)`` -> ``("18", "4")``."""
        return self._parsed()[1]

    def _parsed(self) -> tuple[str, tuple[str, ...]]:
        match = _TYPE_RE.match(self.type)
        if match is None:
            raise ValueError(f"cannot parse the SQL Server type {self.type!r} of {self.name!r}")
        base, args = match.groups()
        parts = tuple(a.strip().lower() for a in args.split(",")) if args else ()
        return base.lower(), parts

    @property
    def length(self) -> int | None:
        """Declared length of string/binary types (characters or bytes); None for ``max``."""
        args = self.type_args
        if self.base_type in ("char", "nchar", "binary", "varchar", "nvarchar", "varbinary"):
            if not args:
                return 1
            return None if args[0] == "max" else int(args[0])
        return None

    @property
    def precision(self) -> int:
        """Precision of decimal/numeric (default 18)."""
        args = self.type_args
        return int(args[0]) if args else 18

    @property
    def scale(self) -> int:
        """Scale: decimal/numeric (default 0), money types 4, time types (default 7)."""
        base, args = self.base_type, self.type_args
        if base in ("money", "smallmoney"):
            return 4
        if base in ("decimal", "numeric"):
            return int(args[1]) if len(args) > 1 else 0
        if base in ("time", "datetime2", "datetimeoffset"):
            return int(args[0]) if args else 7
        return 0

    @property
    def quoted(self) -> str:
        return quote_name(self.name)

    @property
    def ddl(self) -> str:
        return f"{self.quoted} {self.type} {'NULL' if self.nullable else 'NOT NULL'}"


@dataclass(frozen=True)
class ParentRef:
    """A child table's link to its parent: ``columns`` maps child column -> parent key column.

    The workload keeps children consistent with parents (inserted and deleted in the same
    transaction, key updates cascaded) without declaring a foreign key.
    """

    table: str
    columns: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TableDef:
    """One source table: schema, name, columns, primary key (empty: keyless), parent link.

    ``locator`` are the columns the workload uses in ``WHERE`` to find rows: the primary key, or
    for a keyless table the columns given (the first column by default). In a keyless table they
    need not be unique: the workload also inserts exact duplicate rows there.
    """

    schema: str
    name: str
    columns: tuple[ColumnDef, ...]
    primary_key: tuple[str, ...] = ()
    parent: ParentRef | None = None
    capture_instance_name: str | None = None
    keyless_locator: tuple[str, ...] = ()
    weight: float = 1.0
    column_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {c.name: i for i, c in enumerate(self.columns)}
        if len(index) != len(self.columns):
            raise ValueError(f"duplicate column names in {self.full_name}")
        for name in (*self.primary_key, *self.keyless_locator):
            if name not in index:
                raise ValueError(f"{self.full_name}: unknown key column {name!r}")
        object.__setattr__(self, "column_index", index)

    @property
    def full_name(self) -> str:
        """``schema.name`` unquoted, e.g. ``dbo.order lines`` (the model's table key)."""
        return f"{self.schema}.{self.name}"

    @property
    def quoted(self) -> str:
        """``[dbo].[order lines]``."""
        return f"{quote_name(self.schema)}.{quote_name(self.name)}"

    @property
    def has_key(self) -> bool:
        return bool(self.primary_key)

    @property
    def capture_instance(self) -> str:
        """The capture instance name: ``<schema>_<table>``, spaces replaced by ``_``."""
        return self.capture_instance_name or f"{self.schema}_{self.name}".replace(" ", "_")

    @property
    def locator(self) -> tuple[str, ...]:
        if self.primary_key:
            return self.primary_key
        return self.keyless_locator or (self.columns[0].name,)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> ColumnDef:
        return self.columns[self.column_index[name]]

    def create_sql(self) -> str:
        """``CREATE TABLE`` with the primary key as a named constraint."""
        body = [c.ddl for c in self.columns]
        if self.primary_key:
            pk_name = quote_name("pk_" + self.name.replace(" ", "_"))
            keys = ", ".join(quote_name(k) for k in self.primary_key)
            body.append(f"CONSTRAINT {pk_name} PRIMARY KEY ({keys})")
        return f"CREATE TABLE {self.quoted} ({', '.join(body)})"

    def enable_cdc_statement(self) -> Statement:
        """``sys.sp_cdc_enable_table`` for this table (net changes when it has a primary key)."""
        return enable_table_statement(
            self.schema,
            self.name,
            capture_instance=self.capture_instance,
            supports_net_changes=self.has_key,
        )

    def enable_cdc_sql(self) -> str:
        """:meth:`enable_cdc_statement` as T-SQL text with its values written in."""
        return self.enable_cdc_statement().text


DEMO_TABLES: tuple[TableDef, ...] = (
    TableDef(
        "dbo",
        "customers",
        (
            ColumnDef("customer_id", "int", nullable=False),
            ColumnDef("name", "nvarchar(100)", nullable=False, hint="name"),
            ColumnDef("email", "varchar(120)", hint="email"),
            ColumnDef("country", "char(2)", nullable=False, hint="country"),
            ColumnDef("segment", "nchar(4)"),
            ColumnDef("is_active", "bit", nullable=False),
            ColumnDef("loyalty_tier", "tinyint"),
            ColumnDef("birth_date", "date"),
            ColumnDef("created_at", "datetime2(7)", nullable=False),
            ColumnDef("last_login", "datetimeoffset(7)"),
            ColumnDef("external_id", "uniqueidentifier", nullable=False),
            ColumnDef("credit_limit", "money"),
            ColumnDef("preferences", "xml"),
            ColumnDef("notes", "nvarchar(max)"),
        ),
        primary_key=("customer_id",),
        weight=1.0,
    ),
    TableDef(
        "dbo",
        "products",
        (
            ColumnDef("product_id", "int", nullable=False),
            ColumnDef("sku", "varchar(20)", nullable=False, hint="sku"),
            ColumnDef("title", "nvarchar(200)", nullable=False, hint="name"),
            ColumnDef("description", "text"),
            ColumnDef("long_description", "ntext"),
            ColumnDef("list_price", "smallmoney", nullable=False),
            ColumnDef("weight", "real"),
            ColumnDef("rating", "float"),
            ColumnDef("checksum", "binary(16)", nullable=False),
            ColumnDef("thumbnail", "varbinary(256)"),
            ColumnDef("image", "varbinary(max)"),
            ColumnDef("stock", "smallint", nullable=False),
            ColumnDef("available_from", "smalldatetime"),
        ),
        primary_key=("product_id",),
        weight=0.6,
    ),
    TableDef(
        "dbo",
        "orders",
        (
            ColumnDef("order_id", "bigint", nullable=False),
            ColumnDef("customer_id", "int", nullable=False, hint="ref:dbo.customers"),
            ColumnDef("status", "char(10)", nullable=False, hint="status"),
            ColumnDef("ordered_at", "datetime", nullable=False),
            ColumnDef("ship_by", "date"),
            ColumnDef("pickup_time", "time(3)"),
            ColumnDef("confirmed_at", "datetimeoffset(3)"),
            ColumnDef("total", "decimal(19,4)", nullable=False),
            ColumnDef("discount_rate", "numeric(5,4)"),
            ColumnDef("comment", "varchar(max)"),
            ColumnDef("channel", "varchar(16)"),
        ),
        primary_key=("order_id",),
        weight=1.2,
    ),
    TableDef(
        "dbo",
        "order lines",
        (
            ColumnDef("order_id", "bigint", nullable=False),
            ColumnDef("line no", "smallint", nullable=False),
            ColumnDef("product_id", "int", nullable=False, hint="ref:dbo.products"),
            ColumnDef("quantity", "int", nullable=False, hint="quantity"),
            ColumnDef("unit price", "decimal(12,2)", nullable=False),
            ColumnDef("tax", "numeric(38,10)"),
            ColumnDef("gift_message", "nvarchar(400)"),
            ColumnDef("packed_at", "datetime2(3)"),
            ColumnDef("batch", "binary(4)"),
        ),
        primary_key=("order_id", "line no"),
        parent=ParentRef("dbo.orders", (("order_id", "order_id"),)),
        capture_instance_name="dbo_order_lines",
        weight=1.2,
    ),
    TableDef(
        "dbo",
        "events",
        (
            ColumnDef("event_id", "bigint", nullable=False),
            ColumnDef("kind", "varchar(32)", nullable=False, hint="status"),
            ColumnDef("source_host", "nvarchar(64)"),
            ColumnDef("payload", "nvarchar(max)"),
            ColumnDef("attachment", "varbinary(max)"),
            ColumnDef("body", "xml"),
            ColumnDef("occurred_at", "datetime2(7)", nullable=False),
            ColumnDef("occurred_local", "datetimeoffset(2)"),
            ColumnDef("duration", "time(7)"),
            ColumnDef("severity", "smallint"),
            ColumnDef("score", "float"),
            ColumnDef("amount", "decimal(38,6)"),
            ColumnDef("fee", "smallmoney"),
            ColumnDef("acknowledged", "bit"),
            ColumnDef("trace_id", "uniqueidentifier"),
            ColumnDef("legacy_time", "datetime"),
        ),
        keyless_locator=("event_id",),
        weight=0.8,
    ),
)
"""The demo source: five tables in ``dbo``; ``events`` has no primary key."""


def table_by_name(tables: tuple[TableDef, ...], full_name: str) -> TableDef:
    """Find a table by ``schema.name`` (case-insensitive)."""
    for table in tables:
        if table.full_name.lower() == full_name.lower():
            return table
    raise KeyError(full_name)
