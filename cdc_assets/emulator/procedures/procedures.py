"""The system procedures: their registry and the planner of ``EXEC``.

A procedure takes its parameters by name (``@source_name = N't'``) or by position, with SQL
Server's names and defaults; an unknown name is error 8145, a missing required one error 201, too
many arguments error 8144. The modules that define procedures add them to :data:`PROCEDURES`:
:mod:`.cdc_procedures` (``sp_cdc_enable_db``, ``sp_cdc_enable_table`` ...),
:mod:`.cdc_job_procedures` (the agent jobs, ``sp_cdc_scan``, ``sp_cdc_cleanup_change_table``),
:mod:`.cdc_help_procedures` (``sp_cdc_help_*``, ``sp_cdc_get_*``), :mod:`.help_procedures`
(``sp_help`` ...) and :mod:`.catalog_procedures` (the ODBC / JDBC catalog procedures).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from .. import errors
from ..batches.source_text import node_text
from ..translate import statements
from ..translate.plan import Plan, Result, StatementContext
from ..translate.translate import Translator

MISSING = object()


@dataclass(frozen=True)
class Procedure:
    name: str
    params: tuple[str, ...]
    required: tuple[str, ...]
    run: Callable[[StatementContext, dict[str, Any]], Result | None]


# every procedure EXEC knows, by lower-case name (filled by the modules that define them)
PROCEDURES: dict[str, Procedure] = {}


@statements.planner(exp.Execute)
def plan_execute(tr: Translator, node: exp.Execute, text: str) -> Plan:
    target = node.this
    name = target.name if isinstance(target, exp.Table) else str(target)
    schema = (target.db if isinstance(target, exp.Table) else "") or "sys"
    procedure = PROCEDURES.get(name.lower())
    if procedure is None or schema.lower() != "sys":
        # SQL Server's answer for a procedure it does not have (mssql-jdbc tries sp_columns_170
        # first and falls back to sp_columns_100 on this number)
        raise errors.unknown_procedure(node_text(target, text))
    named: list[tuple[str | None, exp.Expression]] = []
    for arg in node.expressions or []:
        if isinstance(arg, exp.EQ) and isinstance(arg.this, exp.Parameter):
            named.append((arg.this.name.lower(), arg.expression))
        else:
            named.append((None, arg))
    for key, _ in named:
        if key is not None and key not in procedure.params:
            raise errors.server_error(
                8145, f"@{key} is not a parameter for procedure {procedure.name}."
            )

    def payload(session: StatementContext, params: Sequence[Any]) -> Result | None:
        args: dict[str, Any] = {}
        for position, (key, value) in enumerate(named):
            if key is None:
                if position >= len(procedure.params):
                    raise errors.server_error(
                        8144,
                        f"Procedure or function {procedure.name} has too many arguments specified.",
                    )
                key = procedure.params[position]
            args[key] = _evaluate(tr, value, params)
        for required in procedure.required:
            if required not in args:
                raise errors.server_error(
                    201,
                    f"Procedure or function '{procedure.name}' expects parameter '@{required}', "
                    "which was not supplied.",
                )
        return procedure.run(session, args)

    return Plan("action", payload=payload, writes=True)


def _evaluate(tr: Translator, node: exp.Expression, params: Sequence[Any]) -> Any:
    index = tr.param_index(node)
    if index is not None:
        return params[index]
    if isinstance(node, exp.Parameter) and not isinstance(node.this, exp.Parameter):
        index, _ = tr.variables.scalar(node.name)  # EXEC p @v: the batch variable's value
        return params[index]
    if isinstance(node, (exp.Var, exp.Column)) and node.name.upper() == "DEFAULT":
        return MISSING
    if isinstance(node, exp.Column) and not node.table:
        return node.name  # EXEC p @x = bareword
    value, _ = tr.literal_value(node)
    return value


def argument(args: dict[str, Any], key: str, default: Any = None) -> Any:
    value = args.get(key, MISSING)
    return default if value is MISSING else value


def flag_argument(value: Any, default: bool) -> bool:
    if value is None or value is MISSING:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def int_argument(value: Any) -> int | None:
    if value is None or value is MISSING:
        return None
    if isinstance(value, (Decimal, float)):
        return int(value)
    return int(value)
