"""Expressions: typing every value, column, operator and built-in, and rewriting it for SQLite.

Every expression gets its SQL Server type, so that a parameter or literal compared with or
assigned to a column is encoded in that column's storage form (see :mod:`.types`), and arithmetic
on values whose storage form is not a number is refused rather than answered wrongly. Calls of
SQL Server's system functions go to :mod:`.system_functions`; subqueries to :mod:`.queries`.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from sqlglot import exp

from .. import errors
from ..values import types as T
from ..values.type_parsing import parse_type_text
from ..values.types import SqlType
from ..values.untyped_values import adapt_untyped
from .scope import Scope
from .translator_core import TranslatorCore, ident
from .type_rules import Want, compare_encoder, decimal_literal_type, family, literal_node

_PASSTHROUGH = (
    exp.Upper,
    exp.Lower,
    exp.Trim,
    exp.Substring,
    exp.Replace,
    exp.Abs,
    exp.Round,
    exp.Nullif,
    exp.StrPosition,
    exp.RowNumber,
    exp.Paren,
    exp.Distinct,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Is,
    exp.Like,
    exp.ILike,
    exp.Exists,
    exp.Ordered,
    exp.BitwiseAnd,
    exp.BitwiseOr,
    exp.BitwiseXor,
    exp.BitwiseNot,
)
_WINDOW_FUNCS: tuple[type[exp.Expression], ...] = tuple(
    cls
    for cls in (
        getattr(exp, name, None)
        for name in ("Rank", "DenseRank", "Lag", "Lead", "FirstValue", "LastValue", "Ntile")
    )
    if cls is not None
)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)
# nodes that are calls of SQL Server's system functions (translated in .system_functions)
SYSTEM_FUNCTION_NODES: tuple[type[exp.Expression], ...] = (
    exp.CurrentTimestampLTZ,
    exp.CurrentSchema,
    exp.DateDiff,
    exp.DateAdd,
    exp.CurrentTimestamp,
    exp.ObjectId,
    exp.CurrentUser,
    exp.Extract,
    exp.Dot,
    exp.Anonymous,
    exp.Parameter,
)


class ExpressionTranslation(TranslatorCore):
    """The expression section of :class:`.translate.Translator`."""

    def is_value(self, node: exp.Expression) -> bool:
        if self.param_index(node) is not None:
            return True
        if isinstance(node, (exp.Literal, exp.National, exp.Null, exp.HexString)):
            return True
        if isinstance(node, exp.Neg):
            return isinstance(node.this, exp.Literal)
        if isinstance(node, exp.Paren):
            return self.is_value(node.this)
        return False

    def resolve_column(
        self, node: exp.Column, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        name = node.name
        qualifier = node.table
        if qualifier:
            source = scope.alias(qualifier)
            if source is None:
                raise errors.server_error(
                    4104, f'The multi-part identifier "{qualifier}.{name}" could not be bound.'
                )
            hit = source.find(name)
            if hit is None:
                raise errors.invalid_column(name)
            return exp.Column(this=ident(hit[0]), table=ident(source.alias)), hit[1]
        current: Scope | None = scope
        while current is not None:
            matches = [(s, h) for s in current.sources if (h := s.find(name)) is not None]
            if len(matches) > 1:
                raise errors.ambiguous_column(name)
            if matches:
                source, hit = matches[0]
                return exp.Column(this=ident(hit[0]), table=ident(source.alias)), hit[1]
            current = current.parent
        raise errors.invalid_column(name)

    def value(
        self, node: exp.Expression, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        """A parameter or literal, encoded for ``want``."""
        index = self.param_index(node)
        if index is not None:
            if want is None:
                return self.param(index, None), None
            encoder = want.type.encoder if want.assign else compare_encoder(want.type)
            return self.param(index, encoder), want.type
        if isinstance(node, exp.Paren):
            inner, t = self.value(node.this, want)
            return exp.Paren(this=inner), t
        literal, natural = self.literal_value(node)
        if literal is None:
            return exp.Null(), want.type if want else None
        if want is None:
            return literal_node(literal), natural
        target = want.type
        if not want.assign and target.is_numeric and isinstance(literal, (int, float, Decimal)):
            return literal_node(literal), natural
        encoder = target.encoder if want.assign else (compare_encoder(target) or adapt_untyped)
        return literal_node(encoder(literal)), target

    def literal_value(self, node: exp.Expression) -> tuple[Any, SqlType | None]:
        if isinstance(node, exp.Null):
            return None, None
        if isinstance(node, exp.National):
            text = node.this
            return text, T.nvarchar(max(len(text), 1))
        if isinstance(node, exp.HexString):
            data = bytes.fromhex(node.this if len(node.this) % 2 == 0 else "0" + node.this)
            return data, SqlType("varbinary", length=max(len(data), 1))
        if isinstance(node, exp.Neg):
            value, t = self.literal_value(node.this)
            return -value, t
        if isinstance(node, exp.Literal):
            if node.is_string:
                return node.this, T.varchar(max(len(node.this), 1))
            text = node.this
            if re.fullmatch(r"\d+", text):
                number = int(text)
                if number < 2**31:
                    return number, T.INT
                if number < 2**63:
                    return number, T.BIGINT
                return Decimal(text), decimal_literal_type(text)
            if "e" in text.lower():
                return float(text), T.FLOAT
            return Decimal(text), decimal_literal_type(text)
        raise errors.not_supported(f"the literal {self.quote(node)}")

    def expr(
        self, node: exp.Expression, scope: Scope, want: Want | None = None
    ) -> tuple[exp.Expression, SqlType | None]:
        """Translate an expression; return the new node and its SQL Server type (or None)."""
        if self.is_value(node):
            return self.value(node, want)
        if isinstance(node, exp.Column):
            if isinstance(node.this, exp.Star):
                raise errors.not_supported("t.* outside the select list")
            return self.resolve_column(node, scope)
        if isinstance(node, _COMPARISONS):
            return self._comparison(node, scope)
        if isinstance(node, exp.Between):
            this, t = self.expr(node.this, scope)
            w = Want(t) if t is not None else None
            low, lt = self.expr(node.args["low"], scope, w)
            high, ht = self.expr(node.args["high"], scope, w)
            self._check_comparable(t, lt, node)
            self._check_comparable(t, ht, node)
            return exp.Between(this=this, low=low, high=high), T.BIT
        if isinstance(node, exp.In):
            return self._in(node, scope)
        if isinstance(node, _ARITH):
            return self._arith(node, scope)
        if isinstance(node, exp.Neg):
            inner, t = self.expr(node.this, scope)
            if t is not None and t.is_text_encoded:
                raise errors.not_supported(f"arithmetic on {t.sql} values ({self.quote(node)})")
            return exp.Neg(this=inner), t
        if isinstance(node, exp.Subquery):
            outs = self.query(node.this, scope)
            if len(outs) != 1:
                raise errors.server_error(
                    116,
                    "Only one expression can be specified in the select list when the subquery is "
                    "not introduced with EXISTS.",
                )
            return node, outs[0].type
        if isinstance(node, exp.Exists):
            self.query(node.this, scope)
            return node, T.BIT
        if isinstance(node, exp.Case):
            return self._case(node, scope, want)
        if isinstance(node, exp.If):
            return self._iif(node, scope, want)
        if isinstance(node, exp.Coalesce):
            return self.coalesce(node, scope, want)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node.this, node.args["to"], scope)
        if isinstance(node, exp.Convert):
            if node.args.get("style") is not None:
                raise errors.not_supported("CONVERT with a style argument")
            return self._cast(node.expression, node.this, scope)
        if isinstance(node, exp.Window):
            return self._window(node, scope)
        if isinstance(node, (exp.Count, exp.Min, exp.Max, exp.Sum, exp.Avg)):
            return self.aggregate(node, scope)
        if isinstance(node, exp.Length):
            inner, _ = self.expr(node.this, scope)
            return exp.Anonymous(
                this="LENGTH", expressions=[exp.Anonymous(this="RTRIM", expressions=[inner])]
            ), T.INT
        if isinstance(node, (exp.Left, exp.Right)):
            inner, t = self.expr(node.this, scope)
            count, _ = self.expr(node.expression, scope)
            if isinstance(node, exp.Left):
                return exp.Anonymous(
                    this="SUBSTR", expressions=[inner, exp.Literal.number(1), count]
                ), t
            return exp.Anonymous(
                this="SUBSTR", expressions=[inner, exp.Neg(this=exp.Paren(this=count))]
            ), t
        if isinstance(node, exp.Concat):
            parts = []
            for arg in node.expressions:
                inner, t = self.expr(arg, scope)
                if t is not None and t.is_text_encoded:
                    raise errors.not_supported(f"CONCAT of {t.sql} values")
                parts.append(
                    exp.Coalesce(
                        this=exp.Cast(this=inner, to=exp.DataType.build("TEXT")),
                        expressions=[exp.Literal.string("")],
                    )
                )
            result = parts[0]
            for part in parts[1:]:
                result = exp.DPipe(this=result, expression=part)
            return result, T.nvarchar(4000)
        if isinstance(node, exp.Uuid) and not node.args:
            return exp.Anonymous(this="_emu_newid", expressions=[]), SqlType("uniqueidentifier")
        if isinstance(node, SYSTEM_FUNCTION_NODES):
            return self.system_function(node, scope, want)
        if isinstance(node, (*_PASSTHROUGH, *_WINDOW_FUNCS)):
            return self._passthrough(node, scope)
        if isinstance(node, exp.Boolean):
            return exp.Literal.number(1 if node.this else 0), T.BIT
        if isinstance(node, exp.Collate):
            return self._collate(node, scope)
        raise errors.not_supported(f"the expression {self.quote(node)}")

    def _collate(self, node: exp.Collate, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        """``x COLLATE name``: the database's collation (case-insensitive, as every string column
        is stored: NOCASE) or a case-sensitive one (BINARY); no other ordering is emulated."""
        inner, t = self.expr(node.this, scope)
        name = node.expression.name.lower()
        if name in ("database_default", "catalog_default") or "_ci_" in f"{name}_":
            sqlite_collation = "NOCASE"
        elif "_cs_" in f"{name}_" or name.endswith("_bin") or name.endswith("_bin2"):
            sqlite_collation = "BINARY"
        else:
            raise errors.not_supported(f"the collation {self.quote(node.expression)}")
        return exp.Collate(this=inner, expression=exp.Var(this=sqlite_collation)), t

    def _passthrough(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        result_type: SqlType | None = None
        for key, value in list(node.args.items()):
            if isinstance(value, exp.Expression) and not isinstance(value, (exp.DataType, exp.Var)):
                new, t = self.expr(value, scope)
                node.set(key, new)
                if key == "this":
                    result_type = t
            elif isinstance(value, list):
                node.set(
                    key,
                    [self.expr(v, scope)[0] if isinstance(v, exp.Expression) else v for v in value],
                )
        if isinstance(node, (exp.Not, exp.And, exp.Or, exp.Is, exp.Like, exp.ILike, exp.Exists)):
            return node, T.BIT
        if isinstance(node, exp.RowNumber):
            return node, T.BIGINT
        if isinstance(node, exp.StrPosition):
            return node, T.INT
        if isinstance(node, (exp.Upper, exp.Lower, exp.Trim, exp.Substring, exp.Replace)):
            if result_type is not None and result_type.is_text_encoded:
                raise errors.not_supported(f"string functions on {result_type.sql} values")
            return node, T.nvarchar(
                4000
            ) if result_type is None or not result_type.is_string else result_type
        return node, result_type

    def _check_comparable(self, a: SqlType | None, b: SqlType | None, node: exp.Expression) -> None:
        fa, fb = family(a), family(b)
        if fa is None or fb is None or fa == fb:
            return
        raise errors.not_supported(
            f"comparing {a.sql if a else '?'} with {b.sql if b else '?'} in {self.quote(node)}"
        )

    def _comparison(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        left, right = node.this, node.expression
        if self.is_value(left) and not self.is_value(right):
            rhs, rt = self.expr(right, scope)
            lhs, lt = self.expr(left, scope, Want(rt) if rt is not None else None)
        else:
            lhs, lt = self.expr(left, scope)
            rhs, rt = self.expr(right, scope, Want(lt) if lt is not None else None)
        self._check_comparable(lt, rt, node)
        if "varbinary" in (lt.name if lt else "", rt.name if rt else ""):
            # binary values of different lengths compare as if zero-padded (0x00 = 0x0000)
            lhs = exp.Anonymous(this="_emu_bin_norm", expressions=[lhs])
            rhs = exp.Anonymous(this="_emu_bin_norm", expressions=[rhs])
        return type(node)(this=lhs, expression=rhs), T.BIT

    def _in(self, node: exp.In, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        this, t = self.expr(node.this, scope)
        node.set("this", this)
        query = node.args.get("query")
        if query is not None:
            outs = self.query(query.this if isinstance(query, exp.Subquery) else query, scope)
            if len(outs) != 1:
                raise errors.server_error(
                    116,
                    "Only one expression can be specified in the select list when the subquery is "
                    "not introduced with EXISTS.",
                )
            self._check_comparable(t, outs[0].type, node)
            return node, T.BIT
        items = []
        for item in node.expressions:
            new, it = self.expr(item, scope, Want(t) if t is not None else None)
            self._check_comparable(t, it, node)
            items.append(new)
        node.set("expressions", items)
        return node, T.BIT

    def _arith(self, node: exp.Expression, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        lhs, lt = self.expr(node.this, scope)
        rhs, rt = self.expr(node.expression, scope)
        for t in (lt, rt):
            if t is not None and t.is_text_encoded:
                raise errors.not_supported(f"arithmetic on {t.sql} values ({self.quote(node)})")
            if t is not None and t.is_binary:
                raise errors.not_supported(f"arithmetic on {t.sql} values ({self.quote(node)})")
        stringy = [
            t is not None and (t.is_string or t.name == "uniqueidentifier") for t in (lt, rt)
        ]
        if isinstance(node, exp.Add) and any(stringy):
            other = rt if stringy[0] else lt
            if other is not None and not (other.is_string or other.name == "uniqueidentifier"):
                raise errors.not_supported(
                    f"'+' between a string and a number ({self.quote(node)})"
                )
            return exp.DPipe(this=lhs, expression=rhs), T.nvarchar(4000)
        if any(stringy):
            raise errors.not_supported(f"arithmetic on strings ({self.quote(node)})")
        if lt is None and rt is None:
            raise errors.not_supported(
                f"arithmetic between values of unknown type ({self.quote(node)}: CAST one operand)"
            )
        known = [t for t in (lt, rt) if t is not None]
        if all(t.is_integer or t.name == "bit" for t in known):
            result = T.BIGINT if any(t.name == "bigint" for t in known) else T.INT
        else:
            result = T.FLOAT
        return type(node)(this=lhs, expression=rhs), result

    def _case(
        self, node: exp.Case, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        operand = node.args.get("this")
        ot: SqlType | None = None
        if operand is not None:
            operand, ot = self.expr(operand, scope)
            node.set("this", operand)
        result_type = self._branch_type(
            [i.args.get("true") for i in node.args.get("ifs") or []] + [node.args.get("default")],
            scope,
            want,
        )
        branch_want = Want(result_type) if result_type is not None else None
        for branch in node.args.get("ifs") or []:
            cond = branch.this
            if operand is not None:
                new_cond, ct = self.expr(cond, scope, Want(ot) if ot is not None else None)
                self._check_comparable(ot, ct, node)
            else:
                new_cond = self.expr(cond, scope)[0]
            branch.set("this", new_cond)
            branch.set("true", self.expr(branch.args["true"], scope, branch_want)[0])
        default = node.args.get("default")
        if default is not None:
            node.set("default", self.expr(default, scope, branch_want)[0])
        return node, result_type

    def _branch_type(
        self, branches: list[exp.Expression | None], scope: Scope, want: Want | None
    ) -> SqlType | None:
        for branch in branches:
            if branch is None or self.is_value(branch):
                continue
            prober = type(self)(self.catalog, self.db_name)
            prober.variables = self.variables  # ISNULL(@v, 0): the batch's variables too
            _, t = prober.expr(branch.copy(), scope)
            if t is not None:
                return t
        for branch in branches:
            if branch is not None and self.is_value(branch) and self.param_index(branch) is None:
                return self.literal_value(branch)[1]
        return want.type if want else None

    def _iif(
        self, node: exp.If, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        result_type = self._branch_type(
            [node.args.get("true"), node.args.get("false")], scope, want
        )
        branch_want = Want(result_type) if result_type is not None else None
        node.set("this", self.expr(node.this, scope)[0])
        node.set("true", self.expr(node.args["true"], scope, branch_want)[0])
        if node.args.get("false") is not None:
            node.set("false", self.expr(node.args["false"], scope, branch_want)[0])
        return node, result_type

    def coalesce(
        self, node: exp.Coalesce, scope: Scope, want: Want | None
    ) -> tuple[exp.Expression, SqlType | None]:
        args = [node.this, *node.expressions]
        result_type = self._branch_type(args, scope, want)
        w = Want(result_type) if result_type is not None else None
        new_args = []
        for arg in args:
            new, t = self.expr(arg, scope, w)
            self._check_comparable(result_type, t, node)
            new_args.append(new)
        return exp.Coalesce(this=new_args[0], expressions=new_args[1:]), result_type

    def _cast(
        self, value: exp.Expression, to: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        target = self.cast_type(to)
        if self.is_value(value):
            return self.value(value, Want(target, assign=True))
        inner, source = self.expr(value, scope)
        if source == target:
            return inner, target
        if target.is_integer:
            if source is None or source.is_numeric:
                return exp.Cast(this=inner, to=exp.DataType.build("INTEGER")), target
        elif target.name in ("float", "real"):
            if source is None or source.is_numeric:
                return exp.Cast(this=inner, to=exp.DataType.build("REAL")), target
        elif target.is_real_decimal:
            if source is None or source.is_numeric:
                return exp.Anonymous(
                    this="ROUND", expressions=[inner, exp.Literal.number(target.decimal_scale)]
                ), target
        elif target.is_sort_decimal and target.name in ("decimal", "numeric"):
            if source is None or (source.is_numeric and not source.is_text_encoded):
                return exp.Anonymous(
                    this="_emu_decimal_text",
                    expressions=[
                        inner,
                        exp.Literal.number(int(target.precision or 18)),
                        exp.Literal.number(target.decimal_scale),
                    ],
                ), target
        elif target.name == "bit":
            if source is None or source.is_numeric:
                return exp.Case(
                    ifs=[exp.If(this=exp.Is(this=inner, expression=exp.Null()), true=exp.Null())],
                    default=exp.Anonymous(
                        this="IIF",
                        expressions=[
                            exp.NEQ(this=inner.copy(), expression=exp.Literal.number(0)),
                            exp.Literal.number(1),
                            exp.Literal.number(0),
                        ],
                    ),
                ), target
        elif target.is_string:
            if source is None or source.is_integer or source.name == "bit":
                return exp.Cast(this=inner, to=exp.DataType.build("TEXT")), target
            if source.is_string or source.name in ("uniqueidentifier", "date"):
                if target.length and target.length > 0:
                    return exp.Anonymous(
                        this="SUBSTR",
                        expressions=[
                            inner,
                            exp.Literal.number(1),
                            exp.Literal.number(target.length),
                        ],
                    ), target
                return inner, target
        elif target.name == "date" and source is not None and family(source) == "datetime":
            return exp.Anonymous(
                this="SUBSTR", expressions=[inner, exp.Literal.number(1), exp.Literal.number(10)]
            ), target
        elif target.name == "datetime2" and source is not None and source.name == "date":
            return exp.DPipe(this=inner, expression=exp.Literal.string(" 00:00:00.0000000")), target
        elif (
            family(target) == family(source) and target.name not in ("datetime", "smalldatetime")
        ) or (target.is_binary and source is not None and source.is_binary):
            return inner, target
        raise errors.not_supported(
            f"CAST/CONVERT from {source.sql if source else 'an expression of unknown type'} to "
            f"{target.sql}"
        )

    def cast_type(self, to: exp.Expression) -> SqlType:
        text = to.sql("tsql") if isinstance(to, exp.DataType) else str(to)
        text = text.replace("VARCHAR(MAX)", "varchar(max)")
        sql_type, _ = parse_type_text(text)
        return sql_type

    def _window(self, node: exp.Window, scope: Scope) -> tuple[exp.Expression, SqlType | None]:
        func, t = self.expr(node.this, scope)
        node.set("this", func)
        partition = node.args.get("partition_by")
        if partition:
            node.set("partition_by", [self.expr(p, scope)[0] for p in partition])
        order = node.args.get("order")
        if order is not None:
            order.set("expressions", [self.expr(o, scope)[0] for o in order.expressions])
        return node, t

    def aggregate(
        self, node: exp.Expression, scope: Scope
    ) -> tuple[exp.Expression, SqlType | None]:
        arg = node.this
        if isinstance(node, exp.Count):
            if arg is not None and not isinstance(arg, exp.Star):
                node.set("this", self.expr(arg, scope)[0])
            return node, T.INT
        if arg is None:
            raise errors.not_supported(f"{self.quote(node)} without an argument")
        if isinstance(arg, exp.Distinct):
            inner_args = [self.expr(a, scope) for a in arg.expressions]
            arg.set("expressions", [a for a, _ in inner_args])
            t = inner_args[0][1] if inner_args else None
            new_arg: exp.Expression = arg
        else:
            new_arg, t = self.expr(arg, scope)
        node.set("this", new_arg)
        if isinstance(node, (exp.Min, exp.Max)):
            return node, t
        if t is not None and (t.is_text_encoded or not (t.is_numeric)):
            raise errors.not_supported(f"{self.quote(node)} on {t.sql} values")
        if isinstance(node, exp.Sum):
            if t is None:
                return node, None
            if t.is_integer or t.name == "bit":
                return node, T.BIGINT if t.name == "bigint" else T.INT
            if t.is_real_decimal:
                return node, SqlType("decimal", precision=15, scale=t.decimal_scale)
            return node, T.FLOAT
        # AVG
        if t is not None and (t.is_integer or t.name == "bit"):
            return exp.Cast(
                this=node, to=exp.DataType.build("INTEGER")
            ), T.BIGINT if t.name == "bigint" else T.INT
        if t is not None and t.is_real_decimal:
            return node, SqlType("decimal", precision=15, scale=max(6, t.decimal_scale))
        return node, T.FLOAT if t is not None else None
