"""The CDC procedures that enable capture: ``sys.sp_cdc_enable_db`` / ``sp_cdc_disable_db`` and
``sys.sp_cdc_enable_table`` / ``sp_cdc_disable_table``.

- ``sp_cdc_enable_db`` / ``sp_cdc_disable_db``: create / drop the ``cdc`` schema's metadata tables
  (before ``sp_cdc_enable_db`` they do not exist: error 208).
- ``sp_cdc_enable_table``: a capture instance (default name ``<schema>_<table>``, at most two per
  table, ``@supports_net_changes`` needs a primary key, ``@captured_column_list`` must include the
  key). Its ``start_lsn`` stays NULL until the capture job passes its creation. The first
  instance of the database creates the capture and cleanup jobs (started).
- ``sp_cdc_disable_table`` (``@capture_instance = 'all'`` removes all of the table's instances).
"""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from typing import Any

from .. import errors
from ..catalog import catalog as catalog_mod
from ..catalog import storage
from ..catalog.catalog import CaptureInstance, EmulatedTable
from ..catalog.catalog_rows import drop_instance, insert_change_table
from ..catalog.storage import quote
from ..cdc import capture, transaction_log
from ..translate.plan import StatementContext
from ..values import types as T
from .procedures import PROCEDURES, Procedure, argument, flag_argument

# -- database ------------------------------------------------------------------------------------


def _enable_db(session: StatementContext, args: dict[str, Any]) -> None:
    with session.write_scope():
        db = session.db
        (enabled,) = db.execute("SELECT value FROM _emu_meta WHERE key = 'cdc_enabled'").fetchone()
        if int(enabled):
            return None
        (top,) = db.execute("SELECT MAX(schema_id) FROM _emu_schemas").fetchone()
        schema_id = storage.CDC_SCHEMA_ID if int(top) < storage.CDC_SCHEMA_ID else int(top) + 1
        db.execute(
            "INSERT OR IGNORE INTO _emu_schemas (schema_id, name) VALUES (?, 'cdc')", (schema_id,)
        )
        storage.create_cdc_tables(db)
        db.execute("UPDATE _emu_meta SET value = 1 WHERE key = 'cdc_enabled'")
        storage.bump_catalog(db, ())
    return None


def _disable_db(session: StatementContext, args: dict[str, Any]) -> None:
    with session.write_scope():
        db = session.db
        cat = session.refresh_catalog()
        if not cat.cdc_enabled:
            return None
        for instance in list(cat.instances.values()):
            drop_instance(db, instance)
        for table in cat.tables_by_id.values():
            if table.tracked and table.object_id is not None:
                transaction_log.drop_log(db, table.object_id)
        db.execute("UPDATE _emu_objects SET is_tracked_by_cdc = 0")
        db.execute("DELETE FROM _emu_ddl_log")
        db.execute("DELETE FROM _emu_transactions")
        db.execute("DELETE FROM _emu_transaction_tables")
        storage.drop_cdc_tables(db)
        db.execute("DELETE FROM _emu_schemas WHERE name = 'cdc'")
        db.execute('DELETE FROM "msdb.dbo.cdc_jobs"')
        db.execute("DELETE FROM _emu_jobs")
        db.execute("UPDATE _emu_meta SET value = 0 WHERE key = 'cdc_enabled'")
        storage.bump_catalog(db)
    return None


def require_cdc(session: StatementContext, cat: catalog_mod.Catalog) -> None:
    if not cat.cdc_enabled:
        raise errors.cdc_error(
            22901,
            f"The database '{session.db_name}' is not enabled for Change Data Capture. Ensure that "
            "the correct database context is set and retry the operation. To report on the "
            "databases enabled for Change Data Capture, query the is_cdc_enabled column in the "
            "sys.databases catalog view.",
        )


def named_capture_instance(
    session: StatementContext, args: dict[str, Any]
) -> tuple[catalog_mod.Catalog, CaptureInstance]:
    """The catalog and the capture instance named by ``@capture_instance`` (22964 if none)."""
    cat = session.refresh_catalog()
    require_cdc(session, cat)
    ci = str(argument(args, "capture_instance"))
    instance = cat.instances.get(ci.lower())
    if instance is None:
        raise errors.cdc_error(
            22964, f"The capture instance '{ci}' does not exist in the database."
        )
    return cat, instance


# -- tables --------------------------------------------------------------------------------------


def _split_names(text: str) -> list[str]:
    names = []
    for part in re.split(r",", text):
        part = part.strip()
        if not part:
            continue
        if part.startswith("[") and part.endswith("]"):
            part = part[1:-1].replace("]]", "]")
        elif part.startswith('"') and part.endswith('"'):
            part = part[1:-1]
        names.append(part)
    return names


def _source_table(
    session: StatementContext, cat: catalog_mod.Catalog, schema: str, name: str
) -> EmulatedTable:
    table = cat.find(name, schema)
    if table is None or table.kind != "user":
        raise errors.cdc_error(
            22853 if table is None else 22812,
            f"Could not find the source table [{schema}].[{name}] in the database "
            f"'{session.db_name}'. Specify an existing user table for @source_schema and "
            "@source_name.",
        )
    return table


def ensure_jobs(db: sqlite3.Connection) -> None:
    """The capture and cleanup jobs, created (started) with the first capture instance."""
    existing = {r[0] for r in db.execute('SELECT job_type FROM "msdb.dbo.cdc_jobs"')}
    settings = {  # maxtrans, maxscans, continuous, pollinginterval, retention, threshold
        "capture": (
            capture.DEFAULT_MAXTRANS,
            capture.DEFAULT_MAXSCANS,
            1,
            capture.DEFAULT_POLLING_INTERVAL,
            0,
            0,
        ),
        "cleanup": (0, 0, 0, 0, capture.DEFAULT_RETENTION, 5000),
    }
    for job, values in settings.items():
        if job not in existing:
            db.execute(
                'INSERT INTO "msdb.dbo.cdc_jobs" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
                (storage.DATABASE_ID, job, str(uuid.uuid4()).upper(), *values),
            )
    started = T.DATETIME.encode(storage.now())
    for job in ("capture", "cleanup"):
        db.execute(
            "INSERT OR IGNORE INTO _emu_jobs (job_type, running, start_count, start_time) "
            "VALUES (?, 1, 1, ?)",
            (job, started),
        )


def _enable_table(session: StatementContext, args: dict[str, Any]) -> None:
    with session.write_scope():
        db = session.db
        cat = session.refresh_catalog()
        require_cdc(session, cat)
        schema = str(argument(args, "source_schema"))
        name = str(argument(args, "source_name"))
        table = _source_table(session, cat, schema, name)
        assert table.object_id is not None
        ci = argument(args, "capture_instance") or f"{table.schema}_{table.name}"
        if not re.fullmatch(r"[^\s\[\]\"']{1,100}", ci):
            raise errors.cdc_error(22939, f"The capture instance name '{ci}' is not valid.")
        if ci.lower() in cat.instances:
            raise errors.cdc_error(
                22926,
                f"Could not create a capture instance because the capture instance name '{ci}' "
                "already exists in the current database. Specify an explicit unique name for the "
                "parameter @capture_instance.",
            )
        if len(cat.instances_of(table.object_id)) >= 2:
            raise errors.cdc_error(
                22962,
                "Two capture instances already exist for source table "
                f"'{table.schema}.{table.name}'. "
                "A table can have at most two capture instances. If you want to create a new "
                "capture instance for this table, you must first remove one of the existing "
                "capture instances.",
            )
        net = flag_argument(argument(args, "supports_net_changes"), bool(table.key))
        if net and not table.key:
            raise errors.cdc_error(
                22939,
                "The parameter @supports_net_changes is set to 1, but the source table does not "
                "have a primary key defined and no alternate unique index has been specified.",
            )
        index_name = argument(args, "index_name")
        if index_name is not None and (table.pk_name or "").lower() != str(index_name).lower():
            raise errors.not_supported("@index_name other than the primary key")
        listed = argument(args, "captured_column_list")
        if listed is not None:
            wanted = {n.lower() for n in _split_names(str(listed))}
            unknown = wanted - {c.name.lower() for c in table.columns}
            if unknown:
                raise errors.cdc_error(
                    22918,
                    "One or more columns in the list of included columns "
                    f"({', '.join(sorted(unknown))}) "
                    f"was not a column of the source table {table.display}.",
                )
            columns = [c for c in table.columns if c.name.lower() in wanted]
            for key in table.key:
                if key.lower() not in wanted:
                    raise errors.cdc_error(
                        22945,
                        f"Could not create the capture instance because column '{key}' of the "
                        f"index '{table.pk_name}' is not in the captured column list. All index "
                        "columns must be included in the captured column list.",
                    )
        else:
            columns = list(table.columns)
        create_lsn = session.next_seq()
        oid = storage.next_object_id(db)
        physical = f"cdc.{ci}_CT"
        ct_columns: list[tuple[str, T.SqlType, bool]] = [
            ("__$start_lsn", T.LSN, False),
            ("__$end_lsn", T.LSN, True),
            ("__$seqval", T.LSN, False),
            ("__$operation", T.INT, False),
            ("__$update_mask", T.VARBINARY128, True),
            *((c.name, c.type, c.nullable) for c in columns),
            ("__$command_id", T.INT, False),
        ]
        session.sqlite(storage.create_table_sql(physical, tuple((n, t) for n, t, _ in ct_columns)))
        db.execute(
            f"CREATE INDEX {quote(physical + '_idx')} ON {quote(physical)} "
            '("__$start_lsn", "__$command_id", "__$seqval", "__$operation")'
        )
        now = T.DATETIME.encode(storage.now())
        insert_change_table(
            db, oid, cat.schemas.get("cdc", storage.CDC_SCHEMA_ID), f"{ci}_CT", physical, ct_columns
        )
        db.execute(
            'INSERT INTO "cdc.change_tables" (object_id, version, source_object_id, '
            "capture_instance, start_lsn, end_lsn, supports_net_changes, has_drop_pending, "
            "role_name, index_name, filegroup_name, create_date, partition_switch) "
            "VALUES (?, 0, ?, ?, NULL, NULL, ?, 0, ?, ?, ?, ?, 1)",
            (
                oid,
                table.object_id,
                ci,
                1 if net else 0,
                argument(args, "role_name"),
                table.pk_name if table.key else None,
                argument(args, "filegroup_name"),
                now,
            ),
        )
        for ordinal, column in enumerate(columns, start=1):
            db.execute(
                'INSERT INTO "cdc.captured_columns" (object_id, column_name, column_id, '
                "column_type, column_ordinal, is_computed, masking_function) "
                "VALUES (?, ?, ?, ?, ?, 0, NULL)",
                (oid, column.name, column.column_id, column.type.name, ordinal),
            )
        for ordinal, key in enumerate(table.key, start=1):
            column = table.column(key)
            assert column is not None
            db.execute(
                'INSERT INTO "cdc.index_columns" (object_id, column_name, index_ordinal, '
                "column_id) "
                "VALUES (?, ?, ?, ?)",
                (oid, column.name, ordinal, column.column_id),
            )
        db.execute(
            "INSERT INTO _emu_instances (object_id, capture_instance, source_object_id, "
            "create_lsn, column_ids) VALUES (?, ?, ?, ?, ?)",
            (oid, ci, table.object_id, create_lsn, json.dumps([c.column_id for c in columns])),
        )
        if not table.tracked:
            transaction_log.create_log(db, table)
            db.execute(
                "UPDATE _emu_objects SET is_tracked_by_cdc = 1 WHERE object_id = ?",
                (table.object_id,),
            )
        ensure_jobs(db)
        storage.bump_catalog(db, (table.object_id, oid))
    return None


def _disable_table(session: StatementContext, args: dict[str, Any]) -> None:
    with session.write_scope():
        db = session.db
        cat = session.refresh_catalog()
        require_cdc(session, cat)
        table = _source_table(
            session, cat, str(argument(args, "source_schema")), str(argument(args, "source_name"))
        )
        assert table.object_id is not None
        ci = str(argument(args, "capture_instance"))
        instances = cat.instances_of(table.object_id)
        if ci.lower() != "all":
            instances = [i for i in instances if i.name.lower() == ci.lower()]
            if not instances:
                raise errors.cdc_error(
                    22960,
                    f"Could not find capture instance '{ci}' for source table {table.display}. "
                    "Specify a valid capture instance for the source table.",
                )
        for instance in instances:
            drop_instance(db, instance)
        if len(instances) == len(cat.instances_of(table.object_id)):
            transaction_log.drop_log(db, table.object_id)
            db.execute(
                "UPDATE _emu_objects SET is_tracked_by_cdc = 0 WHERE object_id = ?",
                (table.object_id,),
            )
            db.execute("DELETE FROM _emu_ddl_log WHERE source_object_id = ?", (table.object_id,))
        storage.bump_catalog(db, (table.object_id, *(i.object_id for i in instances)))
    return None


PROCEDURES.update(
    {
        p.name.lower(): p
        for p in (
            Procedure("sp_cdc_enable_db", (), (), _enable_db),
            Procedure("sp_cdc_disable_db", (), (), _disable_db),
            Procedure(
                "sp_cdc_enable_table",
                (
                    "source_schema",
                    "source_name",
                    "role_name",
                    "capture_instance",
                    "supports_net_changes",
                    "index_name",
                    "captured_column_list",
                    "filegroup_name",
                    "allow_partition_switch",
                ),
                ("source_schema", "source_name", "role_name"),
                _enable_table,
            ),
            Procedure(
                "sp_cdc_disable_table",
                ("source_schema", "source_name", "capture_instance"),
                ("source_schema", "source_name", "capture_instance"),
                _disable_table,
            ),
        )
    }
)
