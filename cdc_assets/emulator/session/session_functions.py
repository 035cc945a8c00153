"""The SQLite functions bound to one session: what the translated SQL asks of the connection that
runs it (the transaction's id, begin LSN and command number, ``@@SPID``, ``SUSER_SNAME()``, the
clock, the CDC functions' range checks, ``sys.partitions.rows``).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

from .. import errors
from ..catalog import storage
from ..catalog.session_views import ISOLATION_CODES
from ..cdc.functions import ALL_OPTIONS, NET_OPTIONS
from ..transactions.transaction import SNAPSHOT, TRAN_IDS, Transaction
from ..values import types as T
from ..values import udfs
from ..values.sqlite_values import encode_lsn_numeric
from ..values.type_parsing import parse_type_text


class SessionFunctions:
    """The part of :class:`.session.Session` that registers and answers its SQLite functions."""

    db: sqlite3.Connection
    db_name: str
    login: str
    login_time: str
    spid: int
    level: str
    tx: Transaction | None
    _udf_error: BaseException | None
    _statement_tran_id: int | None
    next_seq: Callable[[], int]
    rowcount: int
    last_error: int
    error_info: Callable[[str], Any]
    principal_id: Callable[[str | None], int | None]
    is_role_member: Callable[[str | None, str | None], int | None]

    def _guard(self, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except BaseException as exc:
                self._udf_error = exc
                raise

        return call

    def _register_functions(self) -> None:
        db = self.db
        db.create_function("_emu_cmd", 0, self._guard(self._fn_cmd))
        db.create_function("_emu_seq", 0, self._guard(self.next_seq))
        db.create_function("_emu_tran_id", 0, self._fn_tran_id)
        db.create_function("_emu_tran_is_snapshot", 0, self._fn_is_snapshot)
        db.create_function("_emu_tran_begin_time", 0, self._fn_begin_time)
        db.create_function("_emu_tran_type", 0, self._fn_tran_type)
        db.create_function("_emu_tran_begin_lsn", 0, self._fn_begin_lsn)
        db.create_function("_emu_tran_savepoint_lsn", 0, self._fn_savepoint_lsn)
        db.create_function("_emu_trancount", 0, lambda: self.tx.trancount if self.tx else 0)
        db.create_function("_emu_spid", 0, lambda: self.spid)
        db.create_function("_emu_rowcount", 0, lambda: self.rowcount)
        db.create_function("_emu_error", 0, lambda: self.last_error)
        db.create_function("_emu_error_info", 1, self._guard(self.error_info))
        db.create_function("_emu_xact_state", 0, lambda: 1 if self.tx is not None else 0)
        db.create_function("_emu_principal_id", 1, self._guard(self.principal_id))
        db.create_function("_emu_is_rolemember", 2, self._guard(self.is_role_member))
        db.create_function("_emu_login_time", 0, lambda: self.login_time)
        db.create_function("_emu_isolation_level", 0, self._fn_isolation_level)
        db.create_function("_emu_login", 0, lambda: self.login)
        db.create_function("_emu_db_name", 0, lambda: self.db_name, deterministic=True)
        db.create_function("_emu_now", 2, self._guard(self._fn_now))
        db.create_function("_emu_newid", 0, lambda: str(uuid.uuid4()).upper())
        db.create_function("_emu_check_range", 7, self._guard(self._fn_check_range))
        db.create_function("_emu_table_rows", 1, self._guard(self._fn_table_rows))

    def _fn_cmd(self) -> int:
        if self.tx is None:
            raise errors.server_error(0, "change logged outside a transaction")
        return self.tx.cmd

    def _fn_tran_id(self) -> int | None:
        if self.tx is not None:
            return self.tx.tran_id
        if self._statement_tran_id is None:
            self._statement_tran_id = next(TRAN_IDS)
        return self._statement_tran_id

    def _fn_is_snapshot(self) -> int:
        level = self.tx.level if self.tx else self.level
        return 1 if level == SNAPSHOT else 0

    def _fn_isolation_level(self) -> int:
        """sys.dm_exec_sessions.transaction_isolation_level: the session's level, as last SET."""
        return ISOLATION_CODES[self.level]

    def _fn_begin_time(self) -> str | None:
        return T.DATETIME.encode(self.tx.begin_time) if self.tx else None

    def _fn_tran_type(self) -> int:
        if self.tx is None or (not self.tx.wrote and self.tx.begin_lsn is None):
            return 2
        return 1

    def _fn_begin_lsn(self) -> str | None:
        if self.tx is None or self.tx.begin_lsn is None:
            return None
        return encode_lsn_numeric(udfs.lsn_numeric(self.tx.begin_lsn))

    def _fn_savepoint_lsn(self) -> str | None:
        if self.tx is None or self.tx.savepoint_lsn is None:
            return None
        return encode_lsn_numeric(udfs.lsn_numeric(self.tx.savepoint_lsn))

    def _fn_table_rows(self, physical: str) -> int:
        """``sys.partitions.rows`` of a table: its rows as this session sees them."""
        try:
            (count,) = self.db.execute(f"SELECT COUNT(*) FROM {storage.quote(physical)}").fetchone()
        except sqlite3.OperationalError:  # dropped meanwhile
            return 0
        return int(count)

    def _fn_now(self, clock: str, type_sql: str) -> Any:
        sql_type, _ = parse_type_text(type_sql)
        if clock == "utc":
            moment: dt.datetime = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        elif clock == "offset":
            moment = dt.datetime.now().astimezone()
        else:
            moment = dt.datetime.now()
        return sql_type.encode(moment)

    def _fn_check_range(
        self,
        lo: bytes | None,
        hi: bytes | None,
        minimum: bytes | None,
        maximum: bytes | None,
        label: str,
        option: str | None,
        kind: str,
    ) -> int:
        allowed = ALL_OPTIONS if kind == "all" else NET_OPTIONS
        normalized = " ".join(str(option).lower().split()) if option is not None else None
        if (
            lo is None
            or hi is None
            or minimum is None
            or maximum is None
            or normalized not in allowed
            or bytes(lo) < bytes(minimum)
            or bytes(hi) > bytes(maximum)
            or bytes(lo) > bytes(hi)
        ):
            raise errors.cdc_function_range(label)
        return 1
