"""The variables of one batch: ``DECLARE @v type``, ``SET @v``, ``SELECT @v =``, table variables.

SQL Server scopes a variable to the batch that declares it. The session keeps a
:class:`BatchVariables` while it runs a batch and drops it at the end:

- A scalar variable holds a Python value of its declared type (assignments convert as SQL Server
  does, through the type's encoder). Statements that use it get it as an extra parameter: the
  translator binds ``@v`` to the parameter after the caller's own (:meth:`BatchVariables.view`),
  typed as declared, so ``WHERE name = @v`` compares as with a column of that type.
- A table variable is a SQLite temporary table of this connection (``temp."_emu_var_<name>"``),
  resolved by ``FROM @t`` like a table; ``INSERT INTO @t`` fills it from a query, ``VALUES`` or
  ``EXEC`` of a procedure. Differences from SQL Server (see CONTRACT.md): a ROLLBACK in the batch
  also removes rows inserted into a table variable inside the transaction, and UPDATE / DELETE of
  a table variable are refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import errors
from ..catalog.catalog import Column, EmulatedTable
from ..catalog.storage import quote
from ..values import types as T
from ..values.type_parsing import parse_type_text


@dataclass
class Scalar:
    name: str
    type: T.SqlType
    value: Any = None


@dataclass(frozen=True)
class VariableView:
    """What the translator sees: each scalar's parameter index and type, each table variable."""

    scalars: dict[str, tuple[int, T.SqlType]] = field(default_factory=dict)
    tables: dict[str, EmulatedTable] = field(default_factory=dict)

    def scalar(self, name: str) -> tuple[int, T.SqlType]:
        found = self.scalars.get(name.lower())
        if found is None:
            raise undeclared_scalar(name)
        return found

    def table(self, name: str) -> EmulatedTable:
        found = self.tables.get(name.lower())
        if found is None:
            raise errors.server_error(1087, f'Must declare the table variable "@{name}".')
        return found


NO_VARIABLES = VariableView()


def undeclared_scalar(name: str) -> errors.Error:
    return errors.server_error(137, f'Must declare the scalar variable "@{name}".')


class BatchVariables:
    """The scalar and table variables a batch declared so far."""

    def __init__(self, db: sqlite3.Connection, base: int) -> None:
        self.db = db
        self.base = base  # the caller's parameter count: variables bind after them
        self.scalars: dict[str, Scalar] = {}
        self.tables: dict[str, EmulatedTable] = {}
        self._view: VariableView | None = NO_VARIABLES

    # -- declarations ----------------------------------------------------------------------------
    def _check_new(self, name: str) -> None:
        if name.lower() in self.scalars or name.lower() in self.tables:
            raise errors.server_error(
                134,
                f"The variable name '@{name}' has already been declared. Variable names must be "
                "unique within a query batch or stored procedure.",
            )

    def declare(self, name: str, type_text: str) -> Scalar:
        self._check_new(name)
        sql_type = _variable_type(type_text)
        scalar = Scalar(name, sql_type)
        self.scalars[name.lower()] = scalar
        self._view = None
        return scalar

    def declare_table(self, name: str, columns: Sequence[tuple[str, str, bool]]) -> EmulatedTable:
        self._check_new(name)
        typed = [(column, _variable_type(text), nullable) for column, text, nullable in columns]
        seen: set[str] = set()
        for column, _, _ in typed:
            if column.lower() in seen:
                raise errors.server_error(
                    2705,
                    f"Column names in each table must be unique. Column name '{column}' in table "
                    f"'@{name}' is specified more than once.",
                )
            seen.add(column.lower())
        physical = f"_emu_var_{name.lower()}"
        body = ", ".join(f"{quote(c)} {t.decltype}" for c, t, _ in typed)
        self.db.execute(f"DROP TABLE IF EXISTS temp.{quote(physical)}")
        self.db.execute(f"CREATE TEMP TABLE {quote(physical)} ({body})")
        table = EmulatedTable(
            schema="",
            name=f"@{name}",
            physical=physical,
            columns=tuple(
                Column(i, c, t, nullable) for i, (c, t, nullable) in enumerate(typed, start=1)
            ),
            kind="variable",
        )
        self.tables[name.lower()] = table
        self._view = None
        return table

    # -- use -------------------------------------------------------------------------------------
    def scalar(self, name: str) -> Scalar:
        found = self.scalars.get(name.lower())
        if found is None:
            raise undeclared_scalar(name)
        return found

    def assign(self, name: str, value: Any) -> None:
        """Set ``@name`` to ``value`` converted to its type (as SQL Server converts)."""
        scalar = self.scalar(name)
        scalar.value = convert(scalar.type, value)

    def view(self) -> VariableView:
        if self._view is None:
            self._view = VariableView(
                {k: (self.base + i, s.type) for i, (k, s) in enumerate(self.scalars.items())},
                dict(self.tables),
            )
        return self._view

    def signature(self) -> str:
        """What a plan depends on: the parameter base, the variables' names and types."""
        if not self.scalars and not self.tables:
            return ""
        scalars = ",".join(f"{k}:{s.type.sql}" for k, s in self.scalars.items())
        tables = ",".join(
            f"{k}({','.join(f'{c.name}:{c.type.sql}' for c in t.columns)})"
            for k, t in self.tables.items()
        )
        return f"{self.base}|{scalars}|{tables}"

    def arguments(self, params: Sequence[Any]) -> Sequence[Any]:
        """The caller's parameters followed by the variables' values (in declaration order)."""
        if not self.scalars:
            return params
        return [*params[: self.base], *(s.value for s in self.scalars.values())]

    # -- table variables -------------------------------------------------------------------------
    def insert(self, name: str, columns: Sequence[str] | None, rows: list[Sequence[Any]]) -> int:
        """Insert ``rows`` into the table variable ``@name`` (``columns``: which, in order)."""
        table = self.view().table(name)
        if columns is None:
            targets = list(table.columns)
        else:
            targets = []
            for column_name in columns:
                column = table.column(column_name.strip('[]"'))
                if column is None:
                    raise errors.invalid_column(column_name)
                targets.append(column)
        for row in rows:
            if len(row) != len(targets):
                raise errors.server_error(
                    213,
                    "Column name or number of supplied values does not match table definition.",
                )
        encoded = []
        for row in rows:
            values = []
            for column, value in zip(targets, row, strict=True):
                if value is None and not column.nullable:
                    raise errors.null_violation(column.name, table.name, "INSERT")
                values.append(column.type.encode(value))
            encoded.append(values)
        for column in table.columns:
            if not column.nullable and column not in targets:
                raise errors.null_violation(column.name, table.name, "INSERT")
        names = ", ".join(quote(c.name) for c in targets)
        marks = ", ".join("?" for _ in targets)
        self.db.executemany(
            f"INSERT INTO temp.{quote(table.physical)} ({names}) VALUES ({marks})", encoded
        )
        return len(encoded)

    def drop(self) -> None:
        """Drop the batch's table variables (at the end of the batch)."""
        for table in self.tables.values():
            # a cursor still reading it: the next batch's DECLARE replaces it
            with contextlib.suppress(sqlite3.Error):
                self.db.execute(f"DROP TABLE IF EXISTS temp.{quote(table.physical)}")
        self.tables.clear()


def _variable_type(text: str) -> T.SqlType:
    sql_type, end = parse_type_text(text)
    if text[end:].strip():
        raise errors.server_error(102, f"Incorrect syntax near '{text[end:].strip()[:30]}'.")
    return sql_type


def convert(sql_type: T.SqlType, value: Any) -> Any:
    """``value`` as a variable of ``sql_type`` holds it (the Python value of that type)."""
    if value is None:
        return None
    length = sql_type.length
    if sql_type.is_string and isinstance(value, str) and length is not None and length >= 0:
        value = value[:length]  # assigning to a variable truncates silently
    return T.convert_stored(sql_type, sql_type.encode(value))
