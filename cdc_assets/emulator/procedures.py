"""The CDC stored procedures (``EXEC sys.sp_cdc_*``).

Each procedure takes its parameters by name (``@source_name = N't'``) or by position, with SQL
Server's names and defaults; an unknown name is error 8145, a missing required one error 201.

- ``sp_cdc_enable_db`` / ``sp_cdc_disable_db``: create / drop the ``cdc`` schema's metadata tables
  (before ``sp_cdc_enable_db`` they do not exist: error 208).
- ``sp_cdc_enable_table``: a capture instance (default name ``<schema>_<table>``, at most two per
  table, ``@supports_net_changes`` needs a primary key, ``@captured_column_list`` must include the
  key). Its ``start_lsn`` stays NULL until the capture job passes its creation. The first
  instance of the database creates the capture and cleanup jobs (started).
- ``sp_cdc_disable_table`` (``@capture_instance = 'all'`` removes all of the table's instances).
- ``sp_cdc_start_job`` / ``sp_cdc_stop_job`` / ``sp_cdc_change_job`` / ``sp_cdc_help_jobs``.
- ``sp_cdc_scan``: capture scans in the caller (``@maxtrans``, ``@maxscans``).
- ``sp_cdc_cleanup_change_table``: move one instance's low water mark up and delete below it.
- ``sp_cdc_help_change_data_capture``, ``sp_cdc_get_captured_columns``, ``sp_cdc_get_ddl_history``.
"""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlglot import exp

from . import capture, errors, statements, storage, transaction_log
from . import catalog as catalog_mod
from . import types as T
from .catalog import CaptureInstance, EmulatedTable
from .catalog_rows import drop_instance, insert_change_table
from .plan import Plan, Result, ResultColumn, StatementContext
from .source_text import node_text
from .storage import quote
from .translate import Translator

_MISSING = object()


@dataclass(frozen=True)
class Procedure:
    name: str
    params: tuple[str, ...]
    required: tuple[str, ...]
    run: Callable[[StatementContext, dict[str, Any]], Result | None]


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
        return _MISSING
    if isinstance(node, exp.Column) and not node.table:
        return node.name  # EXEC p @x = bareword
    value, _ = tr.literal_value(node)
    return value


def _get(args: dict[str, Any], key: str, default: Any = None) -> Any:
    value = args.get(key, _MISSING)
    return default if value is _MISSING else value


def _flag(value: Any, default: bool) -> bool:
    if value is None or value is _MISSING:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes")
    return bool(value)


def _int(value: Any) -> int | None:
    if value is None or value is _MISSING:
        return None
    if isinstance(value, (Decimal, float)):
        return int(value)
    return int(value)


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


def _require_cdc(session: StatementContext, cat: catalog_mod.Catalog) -> None:
    if not cat.cdc_enabled:
        raise errors.cdc_error(
            22901,
            f"The database '{session.db_name}' is not enabled for Change Data Capture. Ensure that "
            "the correct database context is set and retry the operation. To report on the "
            "databases enabled for Change Data Capture, query the is_cdc_enabled column in the "
            "sys.databases catalog view.",
        )


def _capture_instance(
    session: StatementContext, args: dict[str, Any]
) -> tuple[catalog_mod.Catalog, CaptureInstance]:
    """The catalog and the capture instance named by ``@capture_instance`` (22964 if none)."""
    cat = session.refresh_catalog()
    _require_cdc(session, cat)
    ci = str(_get(args, "capture_instance"))
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
        _require_cdc(session, cat)
        schema = str(_get(args, "source_schema"))
        name = str(_get(args, "source_name"))
        table = _source_table(session, cat, schema, name)
        assert table.object_id is not None
        ci = _get(args, "capture_instance") or f"{table.schema}_{table.name}"
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
        net = _flag(_get(args, "supports_net_changes"), bool(table.key))
        if net and not table.key:
            raise errors.cdc_error(
                22939,
                "The parameter @supports_net_changes is set to 1, but the source table does not "
                "have a primary key defined and no alternate unique index has been specified.",
            )
        index_name = _get(args, "index_name")
        if index_name is not None and (table.pk_name or "").lower() != str(index_name).lower():
            raise errors.not_supported("@index_name other than the primary key")
        listed = _get(args, "captured_column_list")
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
                _get(args, "role_name"),
                table.pk_name if table.key else None,
                _get(args, "filegroup_name"),
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
        _require_cdc(session, cat)
        table = _source_table(
            session, cat, str(_get(args, "source_schema")), str(_get(args, "source_name"))
        )
        assert table.object_id is not None
        ci = str(_get(args, "capture_instance"))
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


# -- jobs ----------------------------------------------------------------------------------------


def _job_type(args: dict[str, Any]) -> str:
    job = str(_get(args, "job_type", "capture") or "capture").lower()
    if job not in ("capture", "cleanup"):
        raise errors.cdc_error(
            22992,
            f"The specified @job_type, '{job}', is not a valid value. Specify 'capture' or "
            "'cleanup'.",
        )
    return job


def _require_job(session: StatementContext, job: str) -> None:
    row = session.db.execute("SELECT 1 FROM _emu_jobs WHERE job_type = ?", (job,)).fetchone()
    if row is None:
        raise errors.cdc_error(
            22997,
            f"The Change Data Capture '{job}' job does not exist in the system table "
            "'msdb.dbo.cdc_jobs'. Use the stored procedure 'sys.sp_cdc_add_job' to add the Change "
            "Data Capture job.",
        )


def _start_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    with session.write_scope():
        _require_job(session, job)
        session.db.execute(
            "UPDATE _emu_jobs SET running = 1, start_count = start_count + 1, start_time = ?, "
            "stop_time = NULL WHERE job_type = ?",
            (T.DATETIME.encode(storage.now()), job),
        )
    return None


def _stop_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    with session.write_scope():
        _require_job(session, job)
        session.db.execute(
            "UPDATE _emu_jobs SET running = 0, stop_time = ? WHERE job_type = ? AND running = 1",
            (T.DATETIME.encode(storage.now()), job),
        )
    return None


def _change_job(session: StatementContext, args: dict[str, Any]) -> None:
    job = _job_type(args)
    updates: dict[str, int] = {}
    for key in ("maxtrans", "maxscans", "continuous", "pollinginterval", "retention", "threshold"):
        value = _int(_get(args, key))
        if value is not None:
            if value < 0 or (key == "retention" and value > 52_494_800):
                raise errors.cdc_error(
                    22999, f"The value specified for the parameter @{key} is not valid."
                )
            updates[key] = value
    with session.write_scope():
        _require_job(session, job)
        for key, value in updates.items():
            session.db.execute(
                f'UPDATE "msdb.dbo.cdc_jobs" SET {key} = ? WHERE job_type = ?', (value, job)
            )
    return None


def _help_jobs(session: StatementContext, args: dict[str, Any]) -> Result:
    rows = session.sqlite(
        "SELECT job_id, job_type, 'cdc.' || ? || '_' || job_type AS job_name, maxtrans, "
        'maxscans, continuous, pollinginterval, retention, threshold FROM "msdb.dbo.cdc_jobs" '
        "ORDER BY job_type",
        (session.db_name,),
    ).fetchall()
    names = [
        ("job_id", T.SqlType("uniqueidentifier")),
        ("job_type", T.nvarchar(20)),
        ("job_name", T.SYSNAME),
        ("maxtrans", T.INT),
        ("maxscans", T.INT),
        ("continuous", T.BIT),
        ("pollinginterval", T.BIGINT),
        ("retention", T.BIGINT),
        ("threshold", T.BIGINT),
    ]
    converted = [
        tuple(
            bool(v) if t is T.BIT and v is not None else v
            for v, (_, t) in zip(r, names, strict=True)
        )
        for r in rows
    ]
    return _result(names, converted)


def _scan(session: StatementContext, args: dict[str, Any]) -> None:
    tx = session.tx
    if tx is not None and (tx.sqlite_mode is not None or not tx.implicit):
        raise errors.cdc_error(
            22924, "sp_cdc_scan cannot be run inside a user transaction; commit or roll back first."
        )
    if tx is not None:
        session.tx = None  # an empty implicit transaction
    maxtrans = _int(_get(args, "maxtrans"))
    maxscans = _int(_get(args, "maxscans")) or 1
    for _ in range(max(1, maxscans)):
        captured = capture.scan_db(session.db, maxtrans)
        if captured < (maxtrans or capture.DEFAULT_MAXTRANS):
            break
    return None


def _cleanup_change_table(session: StatementContext, args: dict[str, Any]) -> None:
    ci = str(_get(args, "capture_instance"))
    mark = _get(args, "low_water_mark")
    with session.write_scope():
        db = session.db
        _, instance = _capture_instance(session, args)
        if mark is None:
            return None
        mark = bytes(mark)
        (maximum,) = db.execute('SELECT MAX(start_lsn) FROM "cdc.lsn_time_mapping"').fetchone()
        if maximum is None or mark > bytes(maximum):
            raise errors.cdc_error(
                22957,
                f"LSN {mark.hex()}, specified as the new low endpoint for the change table "
                f"associated with capture instance '{ci}', is not within the Change Data Capture "
                "database retention period.",
            )
        capture.cleanup_instance(db, instance.object_id, instance.change_table, mark)
        capture.trim_mapping(db)
    return None


# -- help ----------------------------------------------------------------------------------------


def _result(columns: list[tuple[str, T.SqlType]], rows: list[tuple[Any, ...]]) -> Result:
    described = tuple(ResultColumn(name, t, t.python_type) for name, t in columns)
    return Result(described, rows, -1)


def _help_change_data_capture(session: StatementContext, args: dict[str, Any]) -> Result:
    cat = session.refresh_catalog()
    _require_cdc(session, cat)
    schema = _get(args, "source_schema")
    name = _get(args, "source_name")
    rows = session.sqlite(
        "SELECT object_id, source_object_id, capture_instance, start_lsn, end_lsn, "
        "supports_net_changes, has_drop_pending, role_name, index_name, filegroup_name, "
        'create_date FROM "cdc.change_tables" ORDER BY create_date, object_id'
    ).fetchall()
    out = []
    for oid, source, ci, start_lsn, end_lsn, net, drop, role, index, fg, created in rows:
        table = cat.tables_by_id.get(source)
        instance = cat.instances.get(ci.lower())
        if table is None or instance is None:
            continue
        if schema is not None and table.schema.lower() != str(schema).lower():
            continue
        if name is not None and table.name.lower() != str(name).lower():
            continue
        out.append(
            (
                table.schema,
                table.name,
                ci,
                oid,
                source,
                start_lsn,
                end_lsn,
                net,
                drop,
                role,
                index,
                fg,
                created,
                ", ".join(f"[{k}]" for k in instance.key_columns) or None,
                ", ".join(f"[{c}]" for c in instance.captured),
            )
        )
    columns = [
        ("source_schema", T.SYSNAME),
        ("source_table", T.SYSNAME),
        ("capture_instance", T.SYSNAME),
        ("object_id", T.INT),
        ("source_object_id", T.INT),
        ("start_lsn", T.LSN),
        ("end_lsn", T.LSN),
        ("supports_net_changes", T.BIT),
        ("has_drop_pending", T.BIT),
        ("role_name", T.SYSNAME),
        ("index_name", T.SYSNAME),
        ("filegroup_name", T.SYSNAME),
        ("create_date", T.DATETIME),
        ("index_column_list", T.nvarchar(-1)),
        ("captured_column_list", T.nvarchar(-1)),
    ]
    return _result(columns, out)


def _get_captured_columns(session: StatementContext, args: dict[str, Any]) -> Result:
    cat, instance = _capture_instance(session, args)
    source = cat.tables_by_id.get(instance.source_object_id)
    change = cat.tables_by_id.get(instance.object_id)
    out = []
    for ordinal, (name, cid) in enumerate(
        zip(instance.captured, instance.column_ids, strict=True), start=1
    ):
        column = change.column(name) if change else None
        t = column.type if column else None
        out.append(
            (
                source.schema if source else None,
                source.name if source else None,
                instance.name,
                name,
                cid,
                ordinal,
                t.name if t else None,
                t.length if t and t.length and t.is_string else None,
                t.sys_precision if t else None,
                10 if t and t.is_numeric else None,
                t.sys_scale if t else None,
                t.scale if t and t.name in ("time", "datetime2", "datetimeoffset") else None,
            )
        )
    columns = [
        ("source_schema", T.SYSNAME),
        ("source_table", T.SYSNAME),
        ("capture_instance", T.SYSNAME),
        ("column_name", T.SYSNAME),
        ("column_id", T.INT),
        ("ordinal_position", T.INT),
        ("data_type", T.SYSNAME),
        ("character_maximum_length", T.INT),
        ("numeric_precision", T.TINYINT),
        ("numeric_precision_radix", T.SMALLINT),
        ("numeric_scale", T.INT),
        ("datetime_precision", T.SMALLINT),
    ]
    return _result(columns, out)


def _get_ddl_history(session: StatementContext, args: dict[str, Any]) -> Result:
    cat, instance = _capture_instance(session, args)
    source = cat.tables_by_id.get(instance.source_object_id)
    rows = session.sqlite(
        'SELECT required_column_update, ddl_command, ddl_lsn, ddl_time FROM "cdc.ddl_history" '
        "WHERE object_id = ? ORDER BY ddl_lsn",
        (instance.object_id,),
    ).fetchall()
    out = [
        (
            source.schema if source else None,
            source.name if source else None,
            instance.name,
            bool(r[0]),
            r[1],
            r[2],
            r[3],
        )
        for r in rows
    ]
    columns = [
        ("source_schema", T.SYSNAME),
        ("source_table", T.SYSNAME),
        ("capture_instance", T.SYSNAME),
        ("required_column_update", T.BIT),
        ("ddl_command", T.nvarchar(-1)),
        ("ddl_lsn", T.LSN),
        ("ddl_time", T.DATETIME),
    ]
    return _result(columns, out)


PROCEDURES: dict[str, Procedure] = {
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
        Procedure("sp_cdc_start_job", ("job_type",), (), _start_job),
        Procedure("sp_cdc_stop_job", ("job_type",), (), _stop_job),
        Procedure(
            "sp_cdc_change_job",
            (
                "job_type",
                "maxtrans",
                "maxscans",
                "continuous",
                "pollinginterval",
                "retention",
                "threshold",
            ),
            (),
            _change_job,
        ),
        Procedure("sp_cdc_help_jobs", (), (), _help_jobs),
        Procedure(
            "sp_cdc_scan", ("maxtrans", "maxscans", "continuous", "pollinginterval"), (), _scan
        ),
        Procedure(
            "sp_cdc_cleanup_change_table",
            ("capture_instance", "low_water_mark", "threshold", "fcleanupfailed"),
            ("capture_instance", "low_water_mark"),
            _cleanup_change_table,
        ),
        Procedure(
            "sp_cdc_help_change_data_capture",
            ("source_schema", "source_name"),
            (),
            _help_change_data_capture,
        ),
        Procedure(
            "sp_cdc_get_captured_columns",
            ("capture_instance",),
            ("capture_instance",),
            _get_captured_columns,
        ),
        Procedure(
            "sp_cdc_get_ddl_history", ("capture_instance",), ("capture_instance",), _get_ddl_history
        ),
    )
}
