"""INSERT, UPDATE and DELETE statements that keep the table model in step with the database.

Every statement is plain T-SQL through ``cursor.execute`` with values as parameters and quoted
identifiers (the shapes of the emulator's ``CONTRACT.md``), so the same code drives the emulator
and a real SQL Server. A statement that changes another number of rows than the model expects
raises :class:`~.table_model.WorkloadError`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from cdc_assets.sqlserver.quoting import quote_name

from .demo_schema import TableDef
from .random_values import to_parameter
from .table_model import Key, Row, TableModel, TableState, WorkloadError

__all__ = ["MAX_PARAMS", "MAX_VALUES_ROWS", "ModelledWrites"]

MAX_PARAMS = 2000  # SQL Server allows 2100 parameters per request
MAX_VALUES_ROWS = 1000  # and 1000 row constructors per VALUES clause


class ModelledWrites(TableModel):
    """A table model whose changes are sent as statements through one cursor.

    ``statements`` (None: not recorded) receives every statement and its parameters; rows
    inserted, updated and deleted are counted in ``_pending`` until the transaction ends.
    """

    _cursor: Any
    statements: list[tuple[str, tuple[Any, ...]]] | None
    _pending: Counter[str]
    _step_statements: int

    def _exec(self, sql: str, params: Sequence[Any] = (), expect: int | None = None) -> None:
        args = tuple(params)
        if self.statements is not None:
            self.statements.append((sql, args))
        self._step_statements += 1
        if args:
            self._cursor.execute(sql, args)
        else:
            self._cursor.execute(sql)
        if expect is not None:
            count = getattr(self._cursor, "rowcount", -1)
            if count is not None and count >= 0 and count != expect:
                raise WorkloadError(f"{sql!r} changed {count} rows; the model expected {expect}")

    def _insert(self, state: TableState, rows: list[Row]) -> None:
        if not rows:
            return
        table = state.table
        columns = table.columns
        names = ", ".join(c.quoted for c in columns)
        marks = "(" + ", ".join("?" for _ in columns) + ")"
        per_statement = max(1, min(MAX_VALUES_ROWS, MAX_PARAMS // len(columns)))
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            params = [
                to_parameter(c, v) for row in chunk for c, v in zip(columns, row, strict=True)
            ]
            self._exec(
                f"INSERT INTO {table.quoted} ({names}) VALUES {', '.join([marks] * len(chunk))}",
                params,
                expect=len(chunk),
            )
        for row in rows:
            key = state.key_of(row)
            self._put_rows(state, key, [*state.rows.get(key, []), row])
        self._pending["inserted"] += len(rows)

    def _where(
        self, table: TableDef, names: Sequence[str], values: Sequence[Any]
    ) -> tuple[str, list[Any]]:
        text = " AND ".join(f"{quote_name(n)} = ?" for n in names)
        params = [to_parameter(table.column(n), v) for n, v in zip(names, values, strict=True)]
        return text, params

    def _update(self, state: TableState, key: Key, changes: dict[str, Any]) -> None:
        table = state.table
        rows = state.rows[key]
        sets = ", ".join(f"{quote_name(n)} = ?" for n in changes)
        set_params = [to_parameter(table.column(n), v) for n, v in changes.items()]
        where, where_params = self._where(table, table.locator, key)
        self._exec(
            f"UPDATE {table.quoted} SET {sets} WHERE {where}",
            [*set_params, *where_params],
            expect=len(rows),
        )
        index = table.column_index
        new_rows = []
        for row in rows:
            values = list(row)
            for name, value in changes.items():
                values[index[name]] = value
            new_rows.append(tuple(values))
        new_key = state.key_of(new_rows[0])
        self._put_rows(state, key, None)
        self._put_rows(state, new_key, [*state.rows.get(new_key, []), *new_rows])
        self._pending["updated"] += len(rows)

    def _delete(self, state: TableState, key: Key) -> None:
        """Delete the rows at ``key`` and, first, their children."""
        for child in self._children.get(state.table.full_name, []):
            self._delete_children(child, key)
        table = state.table
        where, params = self._where(table, table.locator, key)
        count = len(state.rows[key])
        self._exec(f"DELETE FROM {table.quoted} WHERE {where}", params, expect=count)
        self._put_rows(state, key, None)
        self._pending["deleted"] += count

    def _delete_children(self, child: TableState, parent_key: Key) -> None:
        keys = list(child.children.get(parent_key, {}))
        if not keys:
            return
        assert child.table.parent is not None
        names = [name for name, _ in child.table.parent.columns]
        where, params = self._where(child.table, names, parent_key)
        count = sum(len(child.rows[k]) for k in keys)
        self._exec(f"DELETE FROM {child.table.quoted} WHERE {where}", params, expect=count)
        for key in keys:
            self._put_rows(child, key, None)
        self._pending["deleted"] += count

    def _rekey_children(self, child: TableState, old_parent: Key, new_parent: Key) -> None:
        keys = list(child.children.get(old_parent, {}))
        if not keys:
            return
        assert child.table.parent is not None
        names = [name for name, _ in child.table.parent.columns]
        sets = ", ".join(f"{quote_name(n)} = ?" for n in names)
        set_params = [
            to_parameter(child.table.column(n), v) for n, v in zip(names, new_parent, strict=True)
        ]
        where, params = self._where(child.table, names, old_parent)
        count = sum(len(child.rows[k]) for k in keys)
        self._exec(
            f"UPDATE {child.table.quoted} SET {sets} WHERE {where}",
            [*set_params, *params],
            expect=count,
        )
        moved: list[tuple[Key, list[Row]]] = []
        for key in keys:
            rows = child.rows[key]
            new_rows = []
            for row in rows:
                values = list(row)
                for i, value in zip(child.parent_idx, new_parent, strict=True):
                    values[i] = value
                new_rows.append(tuple(values))
            self._put_rows(child, key, None)
            moved.append((child.key_of(new_rows[0]), new_rows))
        for key, rows in moved:
            self._put_rows(child, key, rows)
        self._pending["updated"] += count
