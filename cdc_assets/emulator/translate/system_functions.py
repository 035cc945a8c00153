"""Calls of SQL Server's system functions, rewritten for SQLite.

Clocks (``GETDATE`` ...), ``DATEDIFF``, ``OBJECT_ID`` / ``OBJECT_NAME`` / ``SCHEMA_NAME``,
``DB_ID``, ``NEWID``, ``ISNULL``, ``QUOTENAME``, ``@@TRANCOUNT``-style session variables and the
CDC functions ``sys.fn_cdc_*`` (whose SQLite text comes from :mod:`.functions`).
"""

from __future__ import annotations

from sqlglot import exp

from .. import errors
from ..cdc import functions
from ..values import offset_functions
from ..values import types as T
from ..values.types import SqlType
from .expressions import ExpressionTranslation
from .scope import Scope
from .type_rules import Want, family

DTO = SqlType("datetimeoffset", scale=7)
_NOW_FUNCS = {
    "GETDATE": ("local", T.DATETIME),
    "CURRENT_TIMESTAMP": ("local", T.DATETIME),
    "SYSDATETIME": ("local", SqlType("datetime2", scale=7)),
    "GETUTCDATE": ("utc", T.DATETIME),
    "SYSUTCDATETIME": ("utc", SqlType("datetime2", scale=7)),
    "SYSDATETIMEOFFSET": ("offset", SqlType("datetimeoffset", scale=7)),
}

_ERROR_FUNCTIONS = {
    "ERROR_NUMBER": T.INT,
    "ERROR_SEVERITY": T.INT,
    "ERROR_STATE": T.INT,
    "ERROR_LINE": T.INT,
    "ERROR_MESSAGE": T.nvarchar(4000),
    "ERROR_PROCEDURE": T.nvarchar(128),
}
# @@VERSION as SQL Server 2022 words it: version parsers (drivers, tools) read "SQL Server 2022"
# and the "16.0.x.y" build from it
PRODUCT_VERSION = "16.0.1000.6"
VERSION_TEXT = (
    f"Microsoft SQL Server 2022 (RTM) - {PRODUCT_VERSION} (X64) \n\tOct  8 2022 05:58:25 \n"
    "\tCopyright (C) 2022 Microsoft Corporation\n\tDeveloper Edition (64-bit) on Linux "
    "(cdc_assets emulator on SQLite) <X64>"
)
# SERVERPROPERTY(name): what SQL Server 2022 Developer Edition answers (strings as nvarchar,
# numbers as int; SQL Server's type is sql_variant); an unknown name gives NULL, as there
_SYSTEM_DATABASES = {"master": 1, "tempdb": 2, "model": 3, "msdb": 4}
_SERVER_PROPERTIES: dict[str, str | int] = {
    "PRODUCTVERSION": PRODUCT_VERSION,
    "PRODUCTMAJORVERSION": "16",
    "PRODUCTMINORVERSION": "0",
    "PRODUCTBUILD": "1000",
    "PRODUCTLEVEL": "RTM",
    "PRODUCTUPDATELEVEL": "",
    "EDITION": "Developer Edition (64-bit)",
    "EDITIONID": 1493152199,
    "ENGINEEDITION": 3,  # Enterprise (Developer and Evaluation say 3 too)
    "MACHINENAME": "cdc_assets_emulator",
    "SERVERNAME": "cdc_assets_emulator",
    "INSTANCENAME": "",
    "COLLATION": "SQL_Latin1_General_CP1_CI_AS",
    "ISINTEGRATEDSECURITYONLY": 0,
    "ISCLUSTERED": 0,
    "ISHADRENABLED": 0,
    "ISFULLTEXTINSTALLED": 0,
    "ISSINGLEUSER": 0,
    "HADRMANAGERSTATUS": 0,
}

# one-argument functions answered from the catalog: query ({} is the argument), its type, result
_CATALOG_LOOKUPS: dict[str, tuple[str, SqlType, SqlType]] = {
    "OBJECT_NAME": ("SELECT name FROM _emu_objects WHERE object_id = {}", T.INT, T.SYSNAME),
    "OBJECT_SCHEMA_NAME": (
        "SELECT s.name FROM _emu_objects AS o JOIN _emu_schemas AS s "
        "ON s.schema_id = o.schema_id WHERE o.object_id = {}",
        T.INT,
        T.SYSNAME,
    ),
    "SCHEMA_NAME": ("SELECT name FROM _emu_schemas WHERE schema_id = {}", T.INT, T.SYSNAME),
    "SCHEMA_ID": ("SELECT schema_id FROM _emu_schemas WHERE name = {}", T.SYSNAME, T.INT),
}


class SystemFunctionTranslation(ExpressionTranslation):
    """The system-function section of :class:`.translate.Translator`."""

    def system_function(
        self, node: exp.Expression, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        if isinstance(node, exp.CurrentTimestampLTZ):
            return self.now_function("SYSDATETIMEOFFSET", want)
        if isinstance(node, exp.CurrentSchema):
            arg = node.this
            return self.anonymous_function(
                exp.Anonymous(this="SCHEMA_NAME", expressions=[arg] if arg is not None else []),
                scope,
                want,
            )
        if isinstance(node, exp.DateDiff):
            return self.datediff_function(node, scope)
        if isinstance(node, exp.CurrentTimestamp):
            return self.now_function("GETDATE", want)
        if isinstance(node, exp.ObjectId):
            return self.object_id_function(node, scope)
        if isinstance(node, exp.CurrentUser):  # SUSER_SNAME(), SUSER_NAME(), CURRENT_USER
            return exp.Anonymous(this="_emu_login", expressions=[]), T.SYSNAME
        if isinstance(node, exp.DateAdd):
            return self.dateadd_function(node, scope, want)
        if isinstance(node, exp.Extract):  # DATEPART(unit, value)
            return self.datepart_function(node, scope)
        if isinstance(node, exp.Dot):
            return self.dotted_function(node, scope, want)
        if isinstance(node, exp.Anonymous):
            return self.anonymous_function(node, scope, want)
        if isinstance(node, exp.Parameter):
            return self.session_variable(node)
        raise errors.not_supported(f"the function {self.quote(node)}")

    def now_function(self, name: str, want: Want | None) -> tuple[exp.Expression, SqlType | None]:
        clock, natural = _NOW_FUNCS[name]
        target = natural
        if want is not None and family(want.type) in ("datetime", "date", "time", "dto"):
            target = want.type
        call = exp.Anonymous(
            this="_emu_now", expressions=[exp.Literal.string(clock), exp.Literal.string(target.sql)]
        )
        return call, target

    _DATEDIFF_SECONDS: dict[str, int] = {  # noqa: RUF012
        "SECOND": 1,
        "SS": 1,
        "S": 1,
        "MINUTE": 60,
        "MI": 60,
        "N": 60,
        "HOUR": 3600,
        "HH": 3600,
    }

    def datediff_function(
        self, node: exp.DateDiff, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        """DATEDIFF(unit, start, end): unit boundaries crossed, for datetime and date values."""
        unit_node = node.args.get("unit")
        unit = (unit_node.name if unit_node is not None else "DAY").upper()

        def operand(value: exp.Expression) -> str:
            if isinstance(value, exp.TimeStrToTime):
                value = value.this
            new, t = self.expr(value, scope, Want(SqlType("datetime2", scale=7)))
            if family(t) not in ("datetime", "date"):
                raise errors.not_supported(f"DATEDIFF on {t.sql if t else 'untyped'} values")
            return self.sql(new)

        end, start = operand(node.this), operand(node.expression)
        if unit in ("DAY", "DD", "D"):
            snippet = (
                f"SELECT CAST(julianday(substr({end}, 1, 10)) - julianday(substr({start}, 1, 10)) "
                "AS INTEGER)"
            )
            return self.raw_node(snippet), T.INT
        size = self._DATEDIFF_SECONDS.get(unit)
        if size is None:
            raise errors.not_supported(f"DATEDIFF with the unit {unit}")

        def boundaries(text: str) -> str:
            seconds = f"CAST(strftime('%s', substr({text}, 1, 19)) AS INTEGER)"
            return f"(({seconds} - ((({seconds}) % {size}) + {size}) % {size}) / {size})"

        return self.raw_node(f"SELECT {boundaries(end)} - {boundaries(start)}"), T.INT

    def dateadd_function(
        self, node: exp.DateAdd, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        """DATEADD(unit, number, value) of a date, datetime or datetime2 value: its type."""
        unit_node = node.args.get("unit")
        unit = (unit_node.name if unit_node is not None else "DAY").upper()
        if unit not in offset_functions.ADD_UNITS:
            raise errors.not_supported(f"the unit {unit} of {self.quote(node)}")
        value, t = self.expr(node.this, scope, want)
        if family(t) not in ("datetime", "date"):
            raise errors.not_supported(f"{self.quote(node)} of {t.sql if t else 'untyped'} values")
        number = self.expr(node.expression, scope, Want(T.INT))[0]
        call = exp.Anonymous(
            this="_emu_dateadd", expressions=[exp.Literal.string(unit), number, value]
        )
        return call, t

    def datepart_function(
        self, node: exp.Extract, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        unit = node.this.name.upper() if isinstance(node.this, exp.Expression) else str(node.this)
        if unit not in offset_functions.UNITS:
            raise errors.not_supported(f"DATEPART with the unit {unit}")
        value, t = self.expr(node.expression, scope)
        kinds = {"dto": "dto", "time": "time", "datetime": "datetime", "date": "datetime"}
        kind = kinds.get(family(t) or "")
        if kind is None:
            raise errors.not_supported(f"DATEPART of {t.sql if t else 'untyped'} values")
        call = exp.Anonymous(
            this="_emu_datepart",
            expressions=[exp.Literal.string(unit), value, exp.Literal.string(kind)],
        )
        return call, T.INT

    def offset_argument(self, node: exp.Expression, scope: Scope) -> exp.Expression:
        """A time-zone offset (``'+05:00'`` or minutes), checked now when it is a literal."""
        if isinstance(node, (exp.Literal, exp.National)):
            literal = str(node.this)
            is_string = isinstance(node, exp.National) or node.is_string
            minutes = offset_functions.offset_minutes(literal if is_string else int(literal))
            return exp.Literal.number(minutes)
        return self.expr(node, scope)[0]

    def object_id_function(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        arg = self.sql(self.expr(node.this, scope, Want(T.nvarchar(776)))[0])
        snippet = (
            "SELECT o.object_id FROM _emu_objects AS o JOIN _emu_schemas AS s "
            f"ON s.schema_id = o.schema_id WHERE s.name = _emu_objname({arg}, 1) "
            f"AND o.name = _emu_objname({arg}, 0)"
        )
        return self.raw_node(snippet), T.INT

    def session_variable(self, node: exp.Parameter) -> tuple[exp.Expression, SqlType | None]:
        inner = node.this
        name = (inner.name if isinstance(inner, exp.Expression) else str(inner)).upper()
        if isinstance(inner, exp.Parameter):
            name = inner.name.upper()
            if name == "TRANCOUNT":
                return exp.Anonymous(this="_emu_trancount", expressions=[]), T.INT
            if name == "SPID":
                return exp.Anonymous(this="_emu_spid", expressions=[]), T.SMALLINT
            if name == "ROWCOUNT":
                return exp.Anonymous(this="_emu_rowcount", expressions=[]), T.INT
            if name == "ERROR":
                return exp.Anonymous(this="_emu_error", expressions=[]), T.INT
            if name == "VERSION":
                return exp.Literal.string(VERSION_TEXT), T.nvarchar(300)
            if name == "SERVERNAME":
                return exp.Literal.string("cdc_assets_emulator"), T.SYSNAME
            raise errors.not_supported(f"@@{name}")
        return self.variable(inner.name if isinstance(inner, exp.Expression) else str(inner))

    def anonymous_function(
        self, node: exp.Anonymous, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        name = node.name.upper()
        args = list(node.expressions)
        if name in _NOW_FUNCS and not args:
            return self.now_function(name, want)
        if name in _ERROR_FUNCTIONS and not args:  # of the error a CATCH block handles
            field = name.removeprefix("ERROR_")
            info = exp.Anonymous(this="_emu_error_info", expressions=[exp.Literal.string(field)])
            return info, _ERROR_FUNCTIONS[name]
        if name in ("DATABASE_PRINCIPAL_ID", "IS_ROLEMEMBER") and len(args) == (
            1 if name == "DATABASE_PRINCIPAL_ID" else 2
        ):  # the principals a script created (session.security)
            values = [self.expr(a, scope, Want(T.SYSNAME))[0] for a in args]
            function = (
                "_emu_principal_id" if name == "DATABASE_PRINCIPAL_ID" else "_emu_is_rolemember"
            )
            return exp.Anonymous(this=function, expressions=values), T.INT
        if name == "XACT_STATE" and not args:
            return exp.Anonymous(this="_emu_xact_state", expressions=[]), T.SMALLINT
        if name == "NEWID" and not args:
            return exp.Anonymous(this="_emu_newid", expressions=[]), SqlType("uniqueidentifier")
        if name in ("TODATETIMEOFFSET", "SWITCHOFFSET") and len(args) == 2:
            wanted = DTO if name == "SWITCHOFFSET" else SqlType("datetime2", scale=7)
            value, t = self.expr(args[0], scope, Want(wanted))
            allowed = ("dto",) if name == "SWITCHOFFSET" else ("datetime", "date")
            if family(t) not in allowed:
                raise errors.not_supported(f"{name} of {t.sql if t else 'untyped'} values")
            function = "_emu_switchoffset" if name == "SWITCHOFFSET" else "_emu_todto"
            offset = self.offset_argument(args[1], scope)
            return exp.Anonymous(this=function, expressions=[value, offset]), DTO
        if name == "SERVERPROPERTY" and len(args) == 1:
            prop = args[0]
            if not isinstance(prop, (exp.Literal, exp.National)) or (
                isinstance(prop, exp.Literal) and not prop.is_string
            ):
                raise errors.not_supported("SERVERPROPERTY of anything but a literal name")
            value = _SERVER_PROPERTIES.get(str(prop.this).upper())
            if value is None:
                return exp.Null(), T.nvarchar(128)
            if isinstance(value, int):
                return exp.Literal.number(value), T.INT
            return exp.Literal.string(value), T.nvarchar(128)
        if name == "USER_NAME" and not args:  # the database user: dbo for sa, else the login's
            login = "_emu_login()"
            return self.raw_node(f"SELECT CASE {login} WHEN 'sa' THEN 'dbo' ELSE {login} END"), (
                T.SYSNAME
            )
        if name == "DB_ID" and not args:
            return exp.Literal.number(5), T.INT
        if name == "DB_NAME" and not args:
            return exp.Anonymous(this="_emu_db_name", expressions=[]), T.SYSNAME
        if name in ("DB_ID", "DB_NAME") and len(args) == 1:
            # the served database is 5; SQL Server's system databases keep their ids; any other
            # name or id is NULL, as for a database that does not exist
            if name == "DB_ID":
                arg = self.sql(self.expr(args[0], scope, Want(T.SYSNAME))[0])
                cases = " ".join(f"WHEN '{n}' THEN {i}" for n, i in _SYSTEM_DATABASES.items())
                select = f"SELECT CASE lower({arg}) WHEN lower(_emu_db_name()) THEN 5 {cases} END"
                return self.raw_node(select), T.INT
            arg = self.sql(self.expr(args[0], scope, Want(T.INT))[0])
            cases = " ".join(f"WHEN {i} THEN '{n}'" for n, i in _SYSTEM_DATABASES.items())
            return self.raw_node(f"SELECT CASE {arg} WHEN 5 THEN _emu_db_name() {cases} END"), (
                T.SYSNAME
            )
        if name == "SCHEMA_NAME" and not args:
            return exp.Literal.string("dbo"), T.SYSNAME
        if name == "SCHEMA_ID" and not args:
            return exp.Literal.number(1), T.INT
        lookup = _CATALOG_LOOKUPS.get(name)
        if lookup is not None and name.startswith("OBJECT_") and len(args) == 2:
            args = args[:1]  # (object_id, database_id): one database is served, this one
        if lookup is not None and len(args) == 1:
            select, argument_type, result_type = lookup
            arg = self.sql(self.expr(args[0], scope, Want(argument_type))[0])
            return self.raw_node(select.format(arg)), result_type
        if name == "COUNT_BIG":
            count = exp.Count(this=args[0] if args else exp.Star())
            new, _ = self.aggregate(count, scope)
            return new, T.BIGINT
        if name == "ISNULL" and len(args) == 2:
            return self.coalesce(exp.Coalesce(this=args[0], expressions=[args[1]]), scope, want)
        if name == "QUOTENAME" and len(args) == 1:
            inner, t = self.expr(args[0], scope)
            if t is not None and not t.is_string:
                raise errors.not_supported(f"QUOTENAME of {t.sql} values")
            quoted = exp.Anonymous(
                this="REPLACE",
                expressions=[inner, exp.Literal.string("]"), exp.Literal.string("]]")],
            )
            text = exp.DPipe(
                this=exp.DPipe(this=exp.Literal.string("["), expression=quoted),
                expression=exp.Literal.string("]"),
            )
            return text, T.nvarchar(258)
        if name == "SCOPE_IDENTITY" and not args:
            return exp.Anonymous(this="last_insert_rowid", expressions=[]), T.INT
        raise errors.not_supported(f"the function {node.name}()")

    def dotted_function(
        self, node: exp.Dot, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        call = node.expression
        owner = node.this.name if isinstance(node.this, exp.Expression) else str(node.this)
        if not isinstance(call, exp.Anonymous):
            raise errors.not_supported(f"the expression {self.quote(node)}")
        name = call.name.lower()
        display = f"{owner}.{call.name}"
        if owner.lower() != "sys":
            raise errors.not_supported(f"the function {display}()")
        args = list(call.expressions)
        cdc = self.catalog.cdc_enabled

        def arg(i: int, t: SqlType | None = None) -> str:
            if i >= len(args):
                raise errors.server_error(
                    313,
                    "An insufficient number of arguments were supplied for the procedure or "
                    f"function {display}.",
                )
            return self.sql(self.expr(args[i], scope, Want(t) if t is not None else None)[0])

        if name == "fn_cdc_get_max_lsn":
            if not cdc:
                return exp.Null(), T.LSN
            return self.raw_node(functions.MAX_LSN_SQL), T.LSN
        if name == "fn_cdc_get_min_lsn":
            a = arg(0, T.SYSNAME)
            if not cdc:
                return exp.HexString(this="00" * 10), T.LSN
            return self.raw_node("SELECT " + functions.min_lsn_sql(a)), T.LSN
        if name == "fn_cdc_increment_lsn":
            return exp.Anonymous(
                this="_emu_lsn_inc", expressions=[self.expr(args[0], scope, Want(T.LSN))[0]]
            ), T.LSN
        if name == "fn_cdc_decrement_lsn":
            return exp.Anonymous(
                this="_emu_lsn_dec", expressions=[self.expr(args[0], scope, Want(T.LSN))[0]]
            ), T.LSN
        if name == "fn_cdc_map_lsn_to_time":
            a = arg(0, T.LSN)
            if not cdc:
                return exp.Null(), T.DATETIME
            return self.raw_node(functions.map_lsn_to_time_sql(a)), T.DATETIME
        if name == "fn_cdc_map_time_to_lsn":
            if len(args) != 2:
                raise errors.server_error(
                    313,
                    "An insufficient number of arguments were supplied for the procedure or "
                    f"function {display}.",
                )
            operator: str | None = None
            literal = args[0]
            if isinstance(literal, (exp.Literal, exp.National)) and (
                isinstance(literal, exp.National) or literal.is_string
            ):
                operator = " ".join(literal.this.lower().split())
                if operator not in (
                    "largest less than",
                    "largest less than or equal",
                    "smallest greater than",
                    "smallest greater than or equal",
                ):
                    raise errors.server_error(
                        22986,
                        f"The value '{literal.this}' is not a valid relational operator for "
                        "sys.fn_cdc_map_time_to_lsn.",
                    )
            op_sql = arg(0, T.nvarchar(30)) if operator is None else "''"
            time_sql = arg(1, T.DATETIME)
            if not cdc:
                return exp.Null(), T.LSN
            return self.raw_node(functions.map_time_to_lsn_sql(operator, op_sql, time_sql)), T.LSN
        if name == "fn_cdc_get_column_ordinal":
            ci, col = arg(0, T.SYSNAME), arg(1, T.SYSNAME)
            if not cdc:
                return exp.Null(), T.INT
            return self.raw_node(functions.column_ordinal_sql(ci, col)), T.INT
        if name == "fn_cdc_has_column_changed":
            ci, col, mask = arg(0, T.SYSNAME), arg(1, T.SYSNAME), arg(2, T.VARBINARY128)
            if not cdc:
                return exp.Null(), T.BIT
            return self.raw_node("SELECT " + functions.has_column_changed_sql(ci, col, mask)), T.BIT
        if name == "fn_cdc_is_bit_set":
            pos, mask = arg(0, T.INT), arg(1, T.VARBINARY128)
            return self.raw_node(f"SELECT _emu_bit_set({mask}, {pos})"), T.BIT
        raise errors.not_supported(f"the function {display}()")
