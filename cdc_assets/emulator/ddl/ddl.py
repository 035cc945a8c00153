"""DDL: CREATE/ALTER/DROP TABLE and CREATE SCHEMA, with the CDC side effects SQL Server has.

- ``CREATE TABLE`` with SQL Server types (see :mod:`.types`), NULL/NOT NULL, DEFAULT constants
  (and ``GETDATE()``-style clocks, ``NEWID()``), PRIMARY KEY (column or table constraint, named
  or not), UNIQUE, ``IDENTITY(1,1)`` on a single-column integer primary key.
- ``ALTER TABLE ... ADD`` / ``DROP COLUMN``. On a table tracked by CDC the existing capture
  instances keep their shape: an added column is not captured, a dropped captured column yields
  NULL in later change rows. Both are recorded for ``cdc.ddl_history`` (written by the capture job
  when it passes the DDL's LSN, as SQL Server does).
- ``DROP TABLE`` of a tracked table removes its capture instances first (as SQL Server does).
- ``CREATE [UNIQUE] [NONCLUSTERED] INDEX`` / ``DROP INDEX ... ON``: SQLite indexes, listed in
  ``sys.indexes`` with the primary key and the UNIQUE constraints; DEFAULTs are listed in
  ``sys.default_constraints`` (see :mod:`.constraint_views`). FOREIGN KEY / REFERENCES are refused.

Here: the planner of every DDL statement, CREATE SCHEMA, the indexes and DROP TABLE; CREATE TABLE
is in :mod:`.create_table`, ALTER TABLE in :mod:`.alter_table`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from sqlglot import exp

from .. import errors
from ..batches.source_text import user_text
from ..catalog import storage
from ..catalog.catalog import EmulatedTable
from ..catalog.catalog_rows import delete_index, delete_table, drop_instance
from ..catalog.constraint_rows import record_index
from ..catalog.storage import quote
from ..cdc import transaction_log
from ..translate import statements
from ..translate.plan import Plan, StatementContext
from ..translate.translate import Translator
from .alter_table import alter_table, user_table
from .create_table import create_table


@statements.planner(exp.Create, exp.Alter, exp.Drop)
def plan_ddl(tr: Translator, node: exp.Expression, text: str) -> Plan:
    if isinstance(node, exp.Create):
        kind = str(node.args.get("kind") or "").upper()
        if kind == "TABLE":
            return _action(create_table(tr, node, text))
        if kind == "SCHEMA":
            return _action(_create_schema(node))
        if kind.endswith("INDEX") and isinstance(node.this, exp.Index):
            return _action(_create_index(tr, node))
        raise errors.not_supported(f"CREATE {kind}")
    if isinstance(node, exp.Alter):
        if str(node.args.get("kind") or "").upper() != "TABLE":
            raise errors.not_supported(f"ALTER {node.args.get('kind')}")
        return _action(alter_table(tr, node, text))
    if isinstance(node, exp.Drop):
        kind = str(node.args.get("kind") or "").upper()
        if kind == "TABLE":
            return _action(_drop_tables(tr, node))
        if kind == "INDEX":
            return _action(_drop_index(tr, node))
        raise errors.not_supported(f"DROP {kind}")
    raise errors.not_supported(user_text(text).split(" ", 1)[0].upper())


def _action(run: Callable[[StatementContext], None]) -> Plan:
    def payload(session: StatementContext, _params: Sequence[Any]) -> None:
        with session.write_scope():
            run(session)
        return None

    return Plan("action", payload=payload, writes=True)


def _create_schema(node: exp.Create) -> Callable[[StatementContext], None]:
    target = node.this
    name = (target.db or target.name) if isinstance(target, exp.Table) else str(target)

    def run(session: StatementContext) -> None:
        db = session.db
        cat = session.refresh_catalog()
        if name.lower() in cat.schemas:
            raise errors.server_error(
                2714, f"There is already an object named '{name}' in the database."
            )
        (top,) = db.execute("SELECT MAX(schema_id) FROM _emu_schemas").fetchone()
        db.execute(
            "INSERT INTO _emu_schemas (schema_id, name) VALUES (?, ?)", (max(int(top), 5) + 1, name)
        )
        storage.bump_catalog(db, ())

    return run


# -- indexes (SQLite indexes, listed in sys.indexes / sys.index_columns) ----------------------


def _index_name(table: EmulatedTable, name: str) -> str:
    return f"{table.physical}.{name}"


def _index_id(db: sqlite3.Connection, table: EmulatedTable, name: str) -> int | None:
    """The index_id of the nonclustered index ``name`` of ``table`` (None: no such index)."""
    row = db.execute(
        "SELECT index_id FROM _emu_indexes WHERE object_id = ? AND name = ?",
        (table.object_id, name),
    ).fetchone()
    return None if row is None else int(row[0])


def _create_index(tr: Translator, node: exp.Create) -> Callable[[StatementContext], None]:
    index = node.this
    kind = str(node.args.get("kind") or "").upper()
    if kind.startswith("CLUSTERED"):
        raise errors.not_supported("CREATE CLUSTERED INDEX")
    params = index.args.get("params")
    columns = [
        (o.this.name if isinstance(o, exp.Ordered) else o.name, bool(o.args.get("desc")))
        for o in (params.args.get("columns") if params is not None else None) or []
    ]
    if not columns or (params is not None and params.args.get("include")):
        raise errors.not_supported(
            "INCLUDE columns" if params is not None and params.args.get("include") else "this index"
        )
    unique = bool(node.args.get("unique"))

    def run(session: StatementContext) -> None:
        table = user_table(session.refresh_catalog(), index.args["table"], session.db_name)
        assert table.object_id is not None
        found = []
        for name, desc in columns:
            column = table.column(name)
            if column is None:
                raise errors.invalid_column(name)
            found.append((column.column_id, desc))
        if _index_id(session.db, table, index.name) is not None or (
            table.pk_name is not None and table.pk_name.lower() == index.name.lower()
        ):
            raise errors.server_error(
                1913,
                f"The operation failed because an index or statistics with name '{index.name}' "
                f"already exists on table '{table.display}'.",
            )
        body = ", ".join(f"{quote(n)}{' DESC' if desc else ''}" for n, desc in columns)
        session.sqlite(
            f"CREATE {'UNIQUE ' if unique else ''}INDEX {quote(_index_name(table, index.name))} "
            f"ON {quote(table.physical)} ({body})"
        )
        record_index(session.db, table.object_id, index.name, found, unique)

    return run


def _drop_index(tr: Translator, node: exp.Drop) -> Callable[[StatementContext], None]:
    on = node.args.get("cluster")
    target = on.this if on is not None else None
    names = [t.name for t in node.args.get("tables") or []]
    if not isinstance(target, exp.Table):
        raise errors.not_supported("DROP INDEX without ON <table>")

    def run(session: StatementContext) -> None:
        table = user_table(session.refresh_catalog(), target, session.db_name)
        assert table.object_id is not None
        for name in names:
            index_id = _index_id(session.db, table, name)
            if index_id is None:
                if node.args.get("exists"):
                    continue
                raise errors.server_error(
                    3701,
                    f"Cannot drop the index '{table.display}.{name}', because it does not exist "
                    "or you do not have permission.",
                )
            (constraint,) = session.db.execute(
                "SELECT constraint_id FROM _emu_indexes WHERE object_id = ? AND index_id = ?",
                (table.object_id, index_id),
            ).fetchone()
            if constraint is not None:
                raise errors.server_error(
                    3723,
                    f"An explicit DROP INDEX is not allowed on index '{table.display}.{name}'. "
                    "It is being used for UNIQUE KEY constraint enforcement.",
                )
            session.sqlite(f"DROP INDEX IF EXISTS {quote(_index_name(table, name))}")
            delete_index(session.db, table.object_id, index_id)

    return run


# -- DROP TABLE ----------------------------------------------------------------------------------


def _drop_tables(tr: Translator, node: exp.Drop) -> Callable[[StatementContext], None]:
    tables = list(node.args.get("tables") or node.expressions or [node.this])
    if_exists = bool(node.args.get("exists"))

    def run(session: StatementContext) -> None:
        db = session.db
        for table_node in tables:
            cat = session.refresh_catalog()
            found = cat.find(table_node.name, table_node.db or None)
            if found is None or found.kind != "user":
                if if_exists and found is None:
                    continue
                if found is not None:
                    raise errors.not_supported(f"DROP TABLE of the system object {found.display}")
                raise errors.server_error(
                    3701,
                    f"Cannot drop the table '{table_node.sql('tsql')}', because it does not exist "
                    "or you do not have permission.",
                )
            assert found.object_id is not None
            instances = cat.instances_of(found.object_id)
            for instance in instances:
                drop_instance(db, instance)
            if found.tracked:
                transaction_log.drop_log(db, found.object_id)
                db.execute(
                    "DELETE FROM _emu_ddl_log WHERE source_object_id = ?", (found.object_id,)
                )
            session.sqlite(f"DROP TABLE {quote(found.physical)}")
            delete_table(db, found.object_id)
            storage.bump_catalog(db, (found.object_id, *(i.object_id for i in instances)))

    return run
