"""One client connection: login, then requests until the client leaves.

Each connection has its own emulator connection (``cdc_assets.emulator.connect``, autocommit on,
as a SQL Server session is), and only uses its public DB-API. Results are streamed: rows are
fetched in small batches and written as they come, so memory stays bounded whatever the size of
the result, and an ATTENTION from the client stops the stream (DONE with the ATTN bit).
A client that breaks the protocol loses its connection; the others are not affected.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import re
import socket
import ssl
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdc_assets import emulator
from cdc_assets.emulator import Error as EmulatorError

from . import requests as rq
from .catalog_rpc import datatype_info
from .datatypes import (
    WireColumn,
    WireTypeError,
    column_for_type,
    column_for_values,
    int_param,
    named,
)
from .errors import error_tokens, internal_error_tokens
from .login import (
    LoginAttempt,
    negotiate,
    parse_login7,
    parse_prelogin,
    prelogin_reply,
    tls_handshake,
)
from .wire import (
    ATTENTION,
    DONE,
    DONE_ATTN,
    DONE_COUNT,
    DONE_ERROR,
    DONE_INXACT,
    DONE_MORE,
    DONEINPROC,
    DONEPROC,
    LOGIN7,
    PRELOGIN,
    REPLY,
    RPC,
    SQL_BATCH,
    TRANSACTION_MANAGER,
    Cancelled,
    ClientGone,
    ProtocolError,
    ResponseWriter,
    Transport,
    colmetadata,
    done,
    envchange_bytes,
    envchange_text,
    loginack,
    message,
    read_message,
    return_status,
    return_value,
    row,
)

log = logging.getLogger(__name__)

_FETCH = 500
_PEEK = 64
_DATATYPE_INFO_RE = re.compile(
    r"^\s*(?:EXEC(?:UTE)?\s+)?(?:\[?sys\]?\.)?\[?sp_datatype_info(?:_100|_90)?\]?\s*(-?\d+)?",
    re.IGNORECASE,
)
ENV_DATABASE, ENV_LANGUAGE, ENV_PACKET_SIZE, ENV_COLLATION = 1, 2, 4, 7
# DONE's CurCmd ([MS-TDS] 2.2.7.6): mssql-jdbc reports a row count as an update count only when
# the command is INSERT, UPDATE, DELETE (or MERGE)
CMD_SELECT = 0xC1
_COMMANDS = {"INSERT": 0xC3, "DELETE": 0xC4, "UPDATE": 0xC5}
ENV_BEGIN, ENV_COMMIT, ENV_ROLLBACK = 8, 9, 10


@dataclass(frozen=True)
class ServedDatabase:
    """What a client connection needs from its server: the database served and who may log in,
    the time-outs and TLS, where a login attempt is recorded and the next transaction id."""

    path: str
    database: str
    logins: Mapping[str, str]
    tls_context: ssl.SSLContext | None
    lock_timeout: float
    login_timeout: float
    record_login: Callable[[LoginAttempt], None]
    next_transaction_id: Callable[[], int]


class ClientConnection:
    """Serves one socket until the client leaves or breaks the protocol."""

    def __init__(self, served: ServedDatabase, sock: socket.socket) -> None:
        self.served = served
        self.sock = sock
        self.transport = Transport(sock)
        self.packet_size = 4096
        self.conn: Any = None
        self.tran_id: int | None = None
        self.prepared: dict[int, tuple[str, list[str]]] = {}
        self._next_handle = 1

    # -- lifecycle -----------------------------------------------------------------------------
    def serve(self) -> None:
        try:
            if self._login():
                self._requests()
        except (ClientGone, ConnectionError, TimeoutError):
            pass
        except (ProtocolError, WireTypeError, struct.error, UnicodeError) as exc:
            log.info("TDS client dropped: %s", exc)
        except OSError as exc:
            log.info("TDS client socket error: %s", exc)
        except Exception:  # a bug must cost this connection only, never the server
            log.exception("TDS server failed on a connection; it is closed")
        finally:
            self.close()

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                log.debug("closing the emulator connection failed", exc_info=True)
            self.conn = None
        with contextlib.suppress(OSError):
            self.sock.close()

    # -- login -----------------------------------------------------------------------------------
    def _login(self) -> bool:
        self.sock.settimeout(self.served.login_timeout)
        kind, _, payload = read_message(self.transport)
        if kind != PRELOGIN:
            raise ProtocolError(f"expected PRELOGIN, got packet type {kind}")
        options = parse_prelogin(payload)
        requested = options.get(0x01, b"\x02")[:1] or b"\x02"
        encryption = negotiate(requested[0], self.served.tls_context)
        attempt = LoginAttempt(requested[0])
        self.served.record_login(attempt)
        self._send_reply(prelogin_reply(encryption))
        if encryption == 1 and self.served.tls_context is not None:
            tls_handshake(self.transport, self.served.tls_context)
        kind, _, payload = read_message(self.transport)
        if kind != LOGIN7:
            raise ProtocolError(f"expected LOGIN7, got packet type {kind}")
        login = parse_login7(payload)
        attempt.user, attempt.database, attempt.app_name = (
            login.user,
            login.database,
            login.app_name,
        )
        attempt.tds_version = login.tds_version
        expected = self.served.logins.get(login.user)
        if expected is None or not hmac.compare_digest(
            expected.encode("utf-8"), login.password.encode("utf-8")
        ):
            refusal = message(18456, 1, 14, f"Login failed for user '{login.user}'.")
            self._send_reply(refusal + done(DONE_ERROR))
            return False
        database = self.served.database
        if login.database and login.database.lower() != database.lower():
            text = f'Cannot open database "{login.database}" requested by the login. '
            refusal = message(4060, 1, 11, text + "The login failed.")
            refusal += message(18456, 1, 14, f"Login failed for user '{login.user}'.")
            self._send_reply(refusal + done(DONE_ERROR))
            return False
        try:
            self.conn = emulator.connect(
                self.served.path,
                autocommit=True,
                timeout=self.served.lock_timeout,
                login=login.user or "sa",
            )
        except EmulatorError as exc:
            self._send_reply(b"".join(error_tokens(exc)) + done(DONE_ERROR))
            return False
        size = login.packet_size or 4096
        self.packet_size = min(max(size, 512), 32767)
        tokens = [
            envchange_text(ENV_DATABASE, database, "master"),
            message(5701, 2, 0, f"Changed database context to '{database}'."),
            envchange_bytes(ENV_COLLATION, _COLLATION, b""),
            envchange_text(ENV_LANGUAGE, "us_english", ""),
            message(5703, 1, 0, "Changed language setting to us_english."),
            loginack(),
            envchange_text(ENV_PACKET_SIZE, str(self.packet_size), str(size)),
        ]
        if login.feature_ext:
            tokens.append(b"\xae\xff")  # FEATUREEXTACK: no optional feature acknowledged
        tokens.append(done(0))
        self._send_reply(b"".join(tokens))
        attempt.accepted = True
        self.sock.settimeout(None)
        return True

    def _send_reply(self, payload: bytes) -> None:
        writer = ResponseWriter(self.transport, 4096)
        writer.write(payload)
        writer.finish()

    # -- requests ------------------------------------------------------------------------------
    def _requests(self) -> None:
        while True:
            kind, _, payload = read_message(self.transport)
            writer = ResponseWriter(self.transport, self.packet_size)
            if kind == ATTENTION:  # arrived after the result was complete
                writer.write(done(DONE_ATTN))
                writer.finish()
                continue
            try:
                if kind == SQL_BATCH:
                    self._batch(writer, rq.batch_text(payload))
                elif kind == RPC:
                    calls = rq.parse_rpc(payload)
                    for n, call in enumerate(calls):
                        self._rpc(writer, call, last=n == len(calls) - 1)
                elif kind == TRANSACTION_MANAGER:
                    self._transaction(writer, rq.parse_transaction_request(payload))
                else:
                    raise ProtocolError(f"unexpected packet type {kind}")
            except Cancelled:
                # the buffer ends on a whole token (tokens are written whole): the client reads
                # on to the acknowledgement
                writer.write(done(DONE_ATTN))
            writer.finish()

    def _batch(self, writer: ResponseWriter, sql: str) -> None:
        match = _DATATYPE_INFO_RE.match(sql)
        if match is not None:
            code = int(match.group(1) or 0)
            self._result(writer, *datatype_info(code), token=DONE, more=False)
            return
        self._execute(writer, sql, [], token=DONE, more=False)

    def _rpc(self, writer: ResponseWriter, call: rq.RpcCall, *, last: bool) -> None:
        proc = call.proc.lower().replace("[", "").replace("]", "")
        short = proc.rsplit(".", 1)[-1]
        params = call.params
        outputs: list[bytes] = []
        ok = True
        if short == "sp_executesql":
            stmt = str(params[0].value or "") if params else ""
            names = rq.declared_names(params[1].value if len(params) > 1 else None)
            sql, values = rq.bind_named(stmt, _values(names, params[2:]))
            ok = self._execute(writer, sql, values, token=DONEINPROC, more=True)
        elif short in ("sp_prepexec", "sp_prepare"):
            if len(params) < 3:
                raise ProtocolError(f"{short} needs a handle, a declaration and a statement")
            names = rq.declared_names(params[1].value)
            stmt = str(params[2].value or "")
            handle = self._next_handle
            self._next_handle += 1
            self.prepared[handle] = (stmt, names)
            if short == "sp_prepexec":
                sql, values = rq.bind_named(stmt, _values(names, params[3:]))
                ok = self._execute(writer, sql, values, token=DONEINPROC, more=True)
            outputs.append(return_value(0, "@" + (params[0].name or "handle"), int_param(handle)))
        elif short == "sp_execute":
            handle = params[0].value if params else None
            prepared = self.prepared.get(handle) if isinstance(handle, int) else None
            if prepared is None:
                writer.write(
                    message(8179, 4, 16, f"Could not find prepared statement with handle {handle}.")
                )
                ok = False
            else:
                stmt, names = prepared
                sql, values = rq.bind_named(stmt, _values(names, params[1:]))
                ok = self._execute(writer, sql, values, token=DONEINPROC, more=True)
        elif short == "sp_unprepare":
            if params and isinstance(params[0].value, int):
                self.prepared.pop(params[0].value, None)
        elif short in ("sp_datatype_info_100", "sp_datatype_info", "sp_datatype_info_90"):
            code = params[0].value if params and isinstance(params[0].value, int) else 0
            self._result(writer, *datatype_info(code), token=DONEINPROC, more=True)
        else:
            sql, values = _exec_text(call.proc, params)
            ok = self._execute(writer, sql, values, token=DONEINPROC, more=True)
        writer.write(return_status(0 if ok else 1))
        for output in outputs:
            writer.write(output)
        status = (0 if ok else DONE_ERROR) | (0 if last else DONE_MORE)
        writer.write(done(status | self._inxact(), token=DONEPROC))

    # -- execution -------------------------------------------------------------------------------
    def _execute(
        self, writer: ResponseWriter, sql: str, params: Sequence[Any], *, token: int, more: bool
    ) -> bool:
        """Run ``sql``; write its results (a DONE-kind ``token`` after each). Returns whether it
        succeeded. ``more``: a DONEPROC follows, so even the last DONE has the MORE bit."""
        cursor = self.conn.cursor()
        try:
            cursor.execute(sql, list(params))
        except EmulatorError as exc:
            self._sync_transaction(writer, failed=True)
            for token_bytes in error_tokens(exc):
                writer.write(token_bytes)
            writer.write(
                done(DONE_ERROR | (DONE_MORE if more else 0) | self._inxact(), token=token)
            )
            return False
        except Exception as exc:  # a bug here must not take the connection down
            log.exception("TDS server failed on a statement")
            writer.write(b"".join(internal_error_tokens(exc)))
            writer.write(done(DONE_ERROR | (DONE_MORE if more else 0), token=token))
            return False
        self._sync_transaction(writer, failed=False)
        try:
            while True:
                for number, state, severity, text in getattr(cursor, "notices", ()):
                    writer.write(message(number, state, severity, text))  # PRINT: an INFO token
                if cursor.description is not None:
                    count = self._stream(writer, cursor)
                    status = DONE_COUNT
                    command = CMD_SELECT
                else:
                    count = cursor.rowcount
                    status = DONE_COUNT if count >= 0 else 0
                    command = _COMMANDS.get(getattr(cursor, "command", ""), 0)
                following = cursor.nextset()
                if following or more:
                    status |= DONE_MORE
                writer.write(done(status | self._inxact(), count, token=token, command=command))
                if not following:
                    return True
        except EmulatorError as exc:
            for token_bytes in error_tokens(exc):
                writer.write(token_bytes)
            writer.write(done(DONE_ERROR | (DONE_MORE if more else 0), token=token))
            return False
        except (Cancelled, ClientGone, ProtocolError):
            raise
        except Exception as exc:  # a value the server cannot encode: this request fails only
            log.exception("TDS server failed while sending a result")
            writer.write(b"".join(internal_error_tokens(exc)))
            writer.write(done(DONE_ERROR | (DONE_MORE if more else 0), token=token))
            return False
        finally:
            cursor.close()

    def _stream(self, writer: ResponseWriter, cursor: Any) -> int:
        """COLMETADATA then the rows of the cursor's current result set; the row count."""
        description = cursor.description
        types = cursor.column_types or (None,) * len(description)
        first = cursor.fetchmany(_PEEK)
        columns = []
        for i, (column, type_text) in enumerate(zip(description, types, strict=True)):
            wire = column_for_type(type_text) if type_text else None
            if wire is None:
                wire = column_for_values([r[i] for r in first], column)
            columns.append(named(wire, column[0] or ""))
        return self._write_rows(writer, columns, first, cursor)

    def _write_rows(
        self,
        writer: ResponseWriter,
        columns: list[WireColumn],
        first: Iterable[Sequence[Any]],
        cursor: Any = None,
    ) -> int:
        writer.write(colmetadata(columns))
        count = 0
        rows: Any = first
        while rows:
            for values in rows:
                writer.write(row(columns, values))
                count += 1
            rows = cursor.fetchmany(_FETCH) if cursor is not None else None
        return count

    def _result(
        self,
        writer: ResponseWriter,
        columns: list[WireColumn],
        rows: list[tuple[Any, ...]],
        *,
        token: int,
        more: bool,
    ) -> None:
        count = self._write_rows(writer, columns, rows)
        writer.write(done(DONE_COUNT | (DONE_MORE if more else 0), count, token=token))

    # -- transactions ----------------------------------------------------------------------------
    def _inxact(self) -> int:
        return DONE_INXACT if self.tran_id is not None else 0

    def _sync_transaction(self, writer: ResponseWriter, *, failed: bool) -> None:
        """Tell the client (ENVCHANGE) when the statement began or ended a transaction: the
        emulator connection's ``@@TRANCOUNT``, read without a statement. A failed statement
        announces only the end of a transaction the client knows of."""
        if self.tran_id is None and failed:
            return
        in_transaction = self.conn.trancount > 0
        self._announce(writer, in_transaction=in_transaction, rolled_back=failed)

    def _announce(self, writer: ResponseWriter, *, in_transaction: bool, rolled_back: bool) -> None:
        if in_transaction and self.tran_id is None:
            self.tran_id = self.served.next_transaction_id()
            writer.write(envchange_bytes(ENV_BEGIN, struct.pack("<q", self.tran_id), b""))
        elif not in_transaction and self.tran_id is not None:
            old = struct.pack("<q", self.tran_id)
            self.tran_id = None
            writer.write(envchange_bytes(ENV_ROLLBACK if rolled_back else ENV_COMMIT, b"", old))

    def _transaction(self, writer: ResponseWriter, request: rq.TransactionRequest) -> None:
        try:
            if request.kind == rq.TM_BEGIN:
                self._begin(request.isolation)
                self._announce(writer, in_transaction=True, rolled_back=False)
            elif request.kind in (rq.TM_COMMIT, rq.TM_ROLLBACK):
                rollback = request.kind == rq.TM_ROLLBACK
                self.conn.rollback() if rollback else self.conn.commit()
                self._announce(writer, in_transaction=False, rolled_back=rollback)
                if request.begin_after:
                    self._begin(request.begin_isolation)
                    self._announce(writer, in_transaction=True, rolled_back=False)
            elif request.kind == rq.TM_SAVE:
                self.conn.cursor().execute(f"SAVE TRANSACTION [{request.name.replace(']', ']]')}]")
            else:
                writer.write(
                    message(
                        40000 + request.kind, 1, 16, "Distributed transactions are not supported."
                    )
                )
                writer.write(done(DONE_ERROR))
                return
        except EmulatorError as exc:
            for token_bytes in error_tokens(exc):
                writer.write(token_bytes)
            writer.write(done(DONE_ERROR | self._inxact()))
            return
        writer.write(done(self._inxact()))

    def _begin(self, isolation: int) -> None:
        cursor = self.conn.cursor()
        if isolation in rq.ISOLATION:
            cursor.execute(f"SET TRANSACTION ISOLATION LEVEL {rq.ISOLATION[isolation]}")
        cursor.execute("BEGIN TRANSACTION")
        cursor.close()


_COLLATION = bytes([0x09, 0x04, 0xD0, 0x00, 0x34])


def _values(names: list[str], params: Sequence[rq.Param]) -> dict[str, Any]:
    """Parameter values by name: named ones by their name, positional ones by declaration order."""
    values: dict[str, Any] = {}
    for n, param in enumerate(params):
        name = param.name or (names[n] if n < len(names) else f"P{n + 1}")
        values[name] = param.value
    return values


def _exec_text(proc: str, params: Sequence[rq.Param]) -> tuple[str, list[Any]]:
    """``EXEC proc @a = ?, ...`` for an RPC call by procedure name."""
    args = []
    for param in params:
        args.append(f"@{param.name} = ?" if param.name else "?")
    text = f"EXEC {proc}"
    if args:
        text += " " + ", ".join(args)
    return text, [p.value for p in params]


__all__ = ["REPLY", "ClientConnection", "ServedDatabase"]
