"""The CDC procedures that report: ``sys.sp_cdc_help_jobs``, ``sp_cdc_help_change_data_capture``,
``sp_cdc_get_captured_columns`` and ``sp_cdc_get_ddl_history`` (result sets with SQL Server's
columns).
"""

from __future__ import annotations

from typing import Any

from ..translate.plan import Result, StatementContext
from ..values import types as T
from .cdc_procedures import named_capture_instance, require_cdc
from .procedures import PROCEDURES, Procedure, argument


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
    return Result.of(names, converted)


def _help_change_data_capture(session: StatementContext, args: dict[str, Any]) -> Result:
    cat = session.refresh_catalog()
    require_cdc(session, cat)
    schema = argument(args, "source_schema")
    name = argument(args, "source_name")
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
    return Result.of(columns, out)


def _get_captured_columns(session: StatementContext, args: dict[str, Any]) -> Result:
    cat, instance = named_capture_instance(session, args)
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
    return Result.of(columns, out)


def _get_ddl_history(session: StatementContext, args: dict[str, Any]) -> Result:
    cat, instance = named_capture_instance(session, args)
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
    return Result.of(columns, out)


PROCEDURES.update(
    {
        p.name.lower(): p
        for p in (
            Procedure("sp_cdc_help_jobs", (), (), _help_jobs),
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
                "sp_cdc_get_ddl_history",
                ("capture_instance",),
                ("capture_instance",),
                _get_ddl_history,
            ),
        )
    }
)
