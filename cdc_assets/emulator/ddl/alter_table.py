"""ALTER TABLE ... ADD / DROP COLUMN. On a table tracked by CDC the existing capture instances keep
their shape: an added column is not captured, a dropped captured column yields NULL in later change
rows. Both are recorded for ``cdc.ddl_history`` (written by the capture job when it passes the
DDL's LSN, as SQL Server does).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from .. import errors
from ..batches.source_text import quoted
from ..catalog import catalog as catalog_mod
from ..catalog import storage
from ..catalog.catalog import EmulatedTable
from ..catalog.catalog_rows import delete_column_default, insert_column
from ..catalog.storage import quote
from ..cdc import transaction_log
from ..translate.plan import StatementContext
from ..translate.translate import Translator
from ..values import types as T
from .create_table import ColumnSpec, column_spec, record_column_default


def user_table(cat: catalog_mod.Catalog, node: exp.Table, db_name: str) -> EmulatedTable:
    table = cat.resolve(node.name, node.db or None, node.catalog or None, db_name)
    if table.kind != "user":
        raise errors.not_supported(f"ALTER/DROP of the system object {table.display}")
    return table


def _log_ddl(session: StatementContext, table: EmulatedTable, text: str) -> None:
    if not table.tracked or table.object_id is None:
        return
    session.db.execute(
        "INSERT INTO _emu_ddl_log (lsn, source_object_id, ddl_command, ddl_time, "
        "required_column_update) VALUES (NULL, ?, ?, ?, 0)",
        (table.object_id, text.strip(), T.DATETIME.encode(storage.now())),
    )
    assert session.tx is not None
    session.tx.ddl_logged = True


def alter_table(tr: Translator, node: exp.Alter, text: str) -> Callable[[StatementContext], None]:
    table_node = node.this
    actions = node.args.get("actions") or []
    adds: list[ColumnSpec] = []
    drops: list[str] = []
    for action in actions:
        if isinstance(action, exp.ColumnDef):
            spec, primary = column_spec(tr, action, text)
            if primary or spec.identity or spec.unique:
                raise errors.not_supported("ALTER TABLE ADD of a key or identity column")
            adds.append(spec)
        elif (
            isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN"
        ):
            drops.extend(c.name for c in action.args.get("tables") or [])
        else:
            raise errors.not_supported(f"ALTER TABLE ... {quoted(action, text)}")

    def run(session: StatementContext) -> None:
        db = session.db
        table = user_table(session.refresh_catalog(), table_node, session.db_name)
        assert table.object_id is not None
        oid = table.object_id
        quoted = quote(table.physical)
        if adds:
            (next_cid,) = db.execute(
                "SELECT next_column_id FROM _emu_objects WHERE object_id = ?", (oid,)
            ).fetchone()
            for spec in adds:
                if table.column(spec.name) is not None:
                    raise errors.server_error(
                        2705,
                        f"Column names in each table must be unique. Column name '{spec.name}' in "
                        f"table '{table.display}' is specified more than once.",
                    )
                piece = f"ALTER TABLE {quoted} ADD COLUMN {quote(spec.name)} {spec.type.decltype}"
                if not spec.nullable:
                    if spec.default_sql is None:
                        if db.execute(f"SELECT 1 FROM {quoted} LIMIT 1").fetchone():
                            raise errors.server_error(
                                4901,
                                "ALTER TABLE only allows columns to be added that can contain "
                                "nulls, "
                                "or have a DEFAULT definition specified, or the column being "
                                "added is "
                                "an identity or timestamp column, or alternatively if none of the "
                                "previous conditions are satisfied the table must be empty to "
                                "allow "
                                f"addition of this column. Column '{spec.name}' cannot be added to "
                                f"non-empty table '{table.name}' because it does not satisfy these "
                                "conditions.",
                            )
                        piece += f" CHECK ({quote(spec.name)} IS NOT NULL)"
                    else:
                        piece += " NOT NULL"
                if spec.default_sql is not None:
                    piece += f" DEFAULT {spec.default_sql}"
                session.sqlite(piece)
                insert_column(db, oid, int(next_cid), spec.name, spec.type, spec.nullable)
                record_column_default(db, oid, table.name, int(next_cid), spec)
                if table.tracked:
                    transaction_log.add_log_column(db, table, int(next_cid), spec.type.decltype)
                next_cid += 1
            db.execute(
                "UPDATE _emu_objects SET next_column_id = ?, modify_date = ? WHERE object_id = ?",
                (next_cid, T.DATETIME.encode(storage.now()), oid),
            )
        for name in drops:
            column = table.column(name)
            if column is None:
                raise errors.server_error(
                    4924,
                    f"ALTER TABLE DROP COLUMN failed because column '{name}' does not exist in "
                    f"table '{table.name}'.",
                )
            if column.name in table.key:
                raise errors.server_error(
                    5074, f"The object '{table.pk_name}' is dependent on column '{column.name}'."
                )
            dependent = db.execute(
                "SELECT i.name FROM _emu_index_columns AS c JOIN _emu_indexes AS i "
                "ON i.object_id = c.object_id AND i.index_id = c.index_id "
                "WHERE c.object_id = ? AND c.column_id = ? ORDER BY i.index_id",
                (oid, column.column_id),
            ).fetchone()
            if dependent is not None:
                raise errors.server_error(
                    5074, f"The index '{dependent[0]}' is dependent on column '{column.name}'."
                )
            if table.tracked:
                transaction_log.drop_triggers(db, oid)
            session.sqlite(f"ALTER TABLE {quoted} DROP COLUMN {quote(column.name)}")
            db.execute(
                "DELETE FROM _emu_columns WHERE object_id = ? AND column_id = ?",
                (oid, column.column_id),
            )
            delete_column_default(db, oid, column.column_id)
        storage.bump_catalog(db, (oid,))
        if table.tracked:
            transaction_log.install_triggers(db, session.refresh_catalog().tables_by_id[oid])
            _log_ddl(session, table, text)

    return run
