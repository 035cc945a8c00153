"""Principals a setup script creates, and the database context it switches to with ``USE``.

``CREATE LOGIN`` / ``ALTER LOGIN`` / ``DROP LOGIN``, ``CREATE USER`` / ``DROP USER`` (in the
database of the context: ``USE msdb`` then ``CREATE USER`` makes an msdb user) and ``ALTER ROLE
... ADD | DROP MEMBER`` keep their principals as :mod:`..catalog.principal_views` describes, with
SQL Server's errors for a name that exists or does not; ``DATABASE_PRINCIPAL_ID(name)`` and
``IS_ROLEMEMBER(role, member)`` read them. ``GRANT`` / ``DENY`` / ``REVOKE`` are accepted and
change nothing: the emulator enforces no permission.

``USE master | msdb | tempdb | model`` switches the context these statements and functions work
in; names of tables still resolve in the served database (the one database the emulator has).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from .. import errors
from ..catalog import storage
from ..catalog.principal_views import FIXED_DATABASE, FIXED_SERVER
from ..transactions.transaction import Transaction
from ..values import types as T

SYSTEM_DATABASES = ("master", "tempdb", "model", "msdb")
_FIXED_ROLES = {name.lower(): pid for name, pid, kind, _ in FIXED_DATABASE if kind == "R"}
_FIXED_USERS = {name.lower(): pid for name, pid, kind, _ in FIXED_DATABASE if kind == "S"}


class Security:
    """The part of :class:`.session.Session` that keeps principals and the database context."""

    db: sqlite3.Connection
    db_name: str
    context_db: str
    write_scope: Callable[..., AbstractContextManager[Transaction]]

    def use(self, name: str) -> None:
        """``USE name``: the served database or a system one; any other is 911."""
        if name.lower() == self.db_name.lower():
            self.context_db = self.db_name
        elif name.lower() in SYSTEM_DATABASES:
            self.context_db = name.lower()
        else:
            raise errors.server_error(
                911,
                f"Database '{name}' does not exist. Make sure that the name is entered correctly.",
            )

    def _rows(self, prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
        for key, value in self.db.execute(
            "SELECT key, value FROM _emu_meta WHERE key LIKE ? || '%'", (prefix,)
        ):
            yield key, json.loads(value)

    def _find(self, prefix: str, name: str) -> dict[str, Any] | None:
        for _, found in self._rows(prefix):
            if str(found["name"]).lower() == name.lower():
                return found
        return None

    def _next_id(self, prefix: str, first: int) -> int:
        return max([first - 1, *(int(v["id"]) for _, v in self._rows(prefix))]) + 1

    def principal_statement(self, control: tuple[Any, ...]) -> None:
        kind = control[0]
        if kind == "permission":
            return  # GRANT / DENY / REVOKE: no permission is enforced
        with self.write_scope():
            if kind == "membership":
                self._membership(*control[1:])
            else:
                _, verb, what, name, login = control
                if what == "login":
                    self._login(verb, name)
                else:
                    self._user(verb, name, login)

    def _login(self, verb: str, name: str) -> None:
        found = self._find("login:", name) or ({"name": "sa"} if name.lower() == "sa" else None)
        if verb == "create":
            if found is not None:
                raise errors.server_error(15025, f"The server principal '{name}' already exists.")
            value = {
                "name": name,
                "id": self._next_id("login:", 256),
                "created": T.DATETIME.encode(storage.now()),
                "database": self.db_name,
            }
            self.db.execute(
                "INSERT INTO _emu_meta (key, value) VALUES (?, ?)",
                (f"login:{name.lower()}", json.dumps(value)),
            )
        elif found is None:
            raise errors.server_error(
                15151,
                f"Cannot {verb} the login '{name}', because it does not exist or you do not have "
                "permission.",
            )
        elif verb == "drop":
            self.db.execute("DELETE FROM _emu_meta WHERE key = ?", (f"login:{name.lower()}",))

    def _user(self, verb: str, name: str, login: str | None) -> None:
        prefix = f"user:{self.context_db.lower()}:"
        exists = name.lower() in _FIXED_USERS or self._find(prefix, name) is not None
        if verb == "create":
            if exists or name.lower() in _FIXED_ROLES:
                raise errors.server_error(
                    15023, f"User, group, or role '{name}' already exists in the current database."
                )
            if login is not None and self._find("login:", login) is None and login != "sa":
                raise errors.server_error(
                    15007, f"'{login}' is not a valid login or you do not have permission."
                )
            value = {
                "name": name,
                "id": self._next_id(prefix, 5),
                "login": login,
                "created": T.DATETIME.encode(storage.now()),
            }
            self.db.execute(
                "INSERT INTO _emu_meta (key, value) VALUES (?, ?)",
                (prefix + name.lower(), json.dumps(value)),
            )
        elif not exists or name.lower() in _FIXED_USERS:
            raise errors.server_error(
                15151,
                f"Cannot {verb} the user '{name}', because it does not exist or you do not have "
                "permission.",
            )
        elif verb == "drop":
            self.db.execute("DELETE FROM _emu_meta WHERE key = ?", (prefix + name.lower(),))

    def _membership(self, verb: str, role: str, member: str) -> None:
        role_id = self.principal_id(role)
        member_id = self.principal_id(member)
        if role_id is None or role.lower() not in _FIXED_ROLES:
            raise errors.server_error(
                15151,
                f"Cannot alter the role '{role}', because it does not exist or you do not have "
                "permission.",
            )
        if member_id is None:
            raise errors.server_error(
                15151,
                f"Cannot add the principal '{member}', because it does not exist or you do not "
                "have permission.",
            )
        key = f"member:{self.context_db.lower()}:{role.lower()}:{member.lower()}"
        self.db.execute("DELETE FROM _emu_meta WHERE key = ?", (key,))
        if verb == "add":
            value = {"role_id": role_id, "member_id": member_id}
            self.db.execute(
                "INSERT INTO _emu_meta (key, value) VALUES (?, ?)", (key, json.dumps(value))
            )

    def principal_id(self, name: str | None) -> int | None:
        """``DATABASE_PRINCIPAL_ID(name)`` in the database of the context."""
        if name is None:
            return None
        lowered = name.lower()
        if lowered in _FIXED_USERS:
            return _FIXED_USERS[lowered]
        if lowered in _FIXED_ROLES:
            return _FIXED_ROLES[lowered]
        found = self._find(f"user:{self.context_db.lower()}:", name)
        return None if found is None else int(found["id"])

    def is_role_member(self, role: str | None, member: str | None) -> int | None:
        """``IS_ROLEMEMBER(role, member)``: 1 or 0, NULL for a role or member that is not."""
        if role is None or member is None:
            return None
        if role.lower() not in _FIXED_ROLES or self.principal_id(member) is None:
            return None
        if role.lower() == "public" or (role.lower() == "db_owner" and member.lower() == "dbo"):
            return 1
        key = f"member:{self.context_db.lower()}:{role.lower()}:{member.lower()}"
        found = self.db.execute("SELECT 1 FROM _emu_meta WHERE key = ?", (key,)).fetchone()
        return 1 if found else 0


__all__ = ["FIXED_SERVER", "SYSTEM_DATABASES", "Security"]
