"""``sys.server_principals``, ``sys.database_principals`` and ``sys.database_role_members``: the
logins, users and role memberships a setup script creates (``CREATE LOGIN``, ``CREATE USER``,
``ALTER ROLE ... ADD MEMBER``), so that its ``IF NOT EXISTS`` checks see them.

The emulator enforces no permission (every login may do everything, as ``sa``), so it keeps
these principals only to answer for them: ``sa`` and the fixed server roles, ``dbo``, ``guest``,
``public`` and the fixed database roles, then those created, as rows of ``_emu_meta``
(``login:<name>``, ``user:<database>:<name>``, ``member:<database>:<role>:<member>``, each value a
JSON object). The TDS server's logins are the ones it is started with, not these.
"""

from __future__ import annotations

from ..values import types as T
from ..values.types import SqlType

Columns = tuple[tuple[str, SqlType], ...]

_CHAR1 = SqlType("char", length=1)
_SID = SqlType("varbinary", length=85)
CREATED = "2022-10-08 06:29:00.0000000"

FIXED_SERVER = (("sa", 1, "S", "SQL_LOGIN"), ("public", 2, "R", "SERVER_ROLE"))
FIXED_SERVER += (("sysadmin", 3, "R", "SERVER_ROLE"),)
FIXED_DATABASE = (
    ("public", 0, "R", "DATABASE_ROLE"),
    ("dbo", 1, "S", "SQL_USER"),
    ("guest", 2, "S", "SQL_USER"),
    ("INFORMATION_SCHEMA", 3, "S", "SQL_USER"),
    ("sys", 4, "S", "SQL_USER"),
    *(
        (role, 16384 + i, "R", "DATABASE_ROLE")
        for i, role in enumerate(
            (
                "db_owner",
                "db_accessadmin",
                "db_securityadmin",
                "db_ddladmin",
                "",
                "db_backupoperator",
                "db_datareader",
                "db_datawriter",
                "db_denydatareader",
                "db_denydatawriter",
            )
        )
        if role
    ),
)

OBJECTS: tuple[tuple[str, Columns], ...] = (
    (
        "server_principals",
        (
            ("name", T.SYSNAME),
            ("principal_id", T.INT),
            ("sid", _SID),
            ("type", _CHAR1),
            ("type_desc", T.nvarchar(60)),
            ("is_disabled", T.BIT),
            ("create_date", T.DATETIME),
            ("modify_date", T.DATETIME),
            ("default_database_name", T.SYSNAME),
            ("default_language_name", T.SYSNAME),
            ("credential_id", T.INT),
            ("owning_principal_id", T.INT),
            ("is_fixed_role", T.BIT),
        ),
    ),
    (
        "database_principals",
        (
            ("name", T.SYSNAME),
            ("principal_id", T.INT),
            ("type", _CHAR1),
            ("type_desc", T.nvarchar(60)),
            ("default_schema_name", T.SYSNAME),
            ("create_date", T.DATETIME),
            ("modify_date", T.DATETIME),
            ("owning_principal_id", T.INT),
            ("sid", _SID),
            ("is_fixed_role", T.BIT),
            ("authentication_type", T.INT),
            ("authentication_type_desc", T.nvarchar(60)),
            ("default_language_name", T.SYSNAME),
            ("default_language_lcid", T.INT),
            ("allow_encrypted_value_modifications", T.BIT),
        ),
    ),
    ("database_role_members", (("role_principal_id", T.INT), ("member_principal_id", T.INT))),
)


def _values(rows: tuple[tuple[str, int, str, str], ...]) -> str:
    return ", ".join(f"('{n}', {i}, '{t}', '{d}')" for n, i, t, d in rows)


_SERVER = f"""
        SELECT column1 AS name, column2 AS principal_id, NULL AS sid, column3 AS type,
               column4 AS type_desc, 0 AS is_disabled, '{CREATED}' AS create_date,
               '{CREATED}' AS modify_date, CASE column3 WHEN 'S' THEN 'master' END
               AS default_database_name, CASE column3 WHEN 'S' THEN 'us_english' END
               AS default_language_name, NULL AS credential_id,
               CASE column3 WHEN 'R' THEN 1 END AS owning_principal_id,
               CASE column3 WHEN 'R' THEN 1 ELSE 0 END AS is_fixed_role
        FROM (VALUES {_values(FIXED_SERVER)})
        UNION ALL
        SELECT json_extract(value, '$.name'), json_extract(value, '$.id'), NULL, 'S',
               'SQL_LOGIN', 0, json_extract(value, '$.created'), json_extract(value, '$.created'),
               json_extract(value, '$.database'), 'us_english', NULL, NULL, 0
        FROM _emu_meta WHERE key LIKE 'login:%'"""

_DATABASE = f"""
        SELECT column1 AS name, column2 AS principal_id, column3 AS type, column4 AS type_desc,
               CASE column3 WHEN 'S' THEN 'dbo' END AS default_schema_name,
               '{CREATED}' AS create_date, '{CREATED}' AS modify_date,
               CASE column3 WHEN 'R' THEN 1 END AS owning_principal_id, NULL AS sid,
               CASE WHEN column2 >= 16384 THEN 1 ELSE 0 END AS is_fixed_role,
               CASE column3 WHEN 'S' THEN 1 ELSE 0 END AS authentication_type,
               CASE column3 WHEN 'S' THEN 'INSTANCE' ELSE 'NONE' END
               AS authentication_type_desc, NULL AS default_language_name,
               NULL AS default_language_lcid, 0 AS allow_encrypted_value_modifications
        FROM (VALUES {_values(FIXED_DATABASE)})
        UNION ALL
        SELECT json_extract(value, '$.name'), json_extract(value, '$.id'), 'S', 'SQL_USER', 'dbo',
               json_extract(value, '$.created'), json_extract(value, '$.created'), NULL, NULL, 0,
               1, 'INSTANCE', NULL, NULL, 0
        FROM _emu_meta WHERE key LIKE 'user:' || _emu_db_name() || ':%'"""

_MEMBERS = """
        SELECT json_extract(value, '$.role_id') AS role_principal_id,
               json_extract(value, '$.member_id') AS member_principal_id
        FROM _emu_meta WHERE key LIKE 'member:' || _emu_db_name() || ':%'"""

VIEWS: dict[str, str] = {
    "sys.server_principals": _SERVER,
    "sys.database_principals": _DATABASE,
    "sys.database_role_members": _MEMBERS,
}
