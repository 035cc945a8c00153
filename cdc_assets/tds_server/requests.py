"""Client requests: SQL batch text, RPC calls with their parameters, transaction manager requests,
and the rewriting of named parameters (``@P1``) into the emulator's ``?`` placeholders.

[MS-TDS] 2.2.5.3 (ALL_HEADERS), 2.2.6.7 (SQLBatch), 2.2.6.6 (RPCRequest; procedure ids such as
10 = sp_executesql, 13 = sp_prepexec), 2.2.6.9 (TransMgrReq).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .datatypes import Reader, WireTypeError, read_param_value
from .wire import ProtocolError

PROC_IDS = {
    10: "sp_executesql",
    11: "sp_prepare",
    12: "sp_execute",
    13: "sp_prepexec",
    15: "sp_unprepare",
}
TM_BEGIN, TM_COMMIT, TM_ROLLBACK, TM_SAVE = 5, 7, 8, 9
ISOLATION = {
    1: "READ UNCOMMITTED",
    2: "READ COMMITTED",
    3: "REPEATABLE READ",
    4: "SERIALIZABLE",
    5: "SNAPSHOT",
}


def skip_all_headers(r: Reader) -> None:
    total = r.unpack("<I")
    if total < 4:
        raise ProtocolError("ALL_HEADERS length is too small")
    r.take(total - 4)


def batch_text(payload: bytes) -> str:
    r = Reader(payload)
    skip_all_headers(r)
    if (len(payload) - r.pos) % 2:
        raise ProtocolError("SQL batch text is not UTF-16")
    return payload[r.pos :].decode("utf-16-le", errors="replace")


@dataclass(frozen=True)
class Param:
    name: str  # without '@'; '' when positional
    value: Any
    output: bool


@dataclass(frozen=True)
class RpcCall:
    proc: str  # a name from PROC_IDS, or the procedure name the client sent
    params: list[Param]


def parse_rpc(payload: bytes) -> list[RpcCall]:
    """Every call of one RPC request (several are separated by a batch flag byte)."""
    r = Reader(payload)
    skip_all_headers(r)
    calls = []
    try:
        while not r.at_end:
            size = r.unpack("<H")
            if size == 0xFFFF:
                number = r.unpack("<H")
                proc = PROC_IDS.get(number, f"#{number}")
            else:
                proc = r.take(2 * size).decode("utf-16-le")
            r.unpack("<H")  # option flags
            params = []
            while not r.at_end and r.data[r.pos] not in (0x80, 0xFF):
                name = r.b_varchar().lstrip("@")
                status = r.byte()
                params.append(Param(name, read_param_value(r), bool(status & 0x01)))
            calls.append(RpcCall(proc, params))
            if not r.at_end:
                r.byte()  # batch flag
    except WireTypeError as exc:
        raise ProtocolError(str(exc)) from None
    return calls


@dataclass(frozen=True)
class TransactionRequest:
    kind: int
    isolation: int = 0
    name: str = ""
    begin_after: bool = False
    begin_isolation: int = 0


def parse_transaction_request(payload: bytes) -> TransactionRequest:
    r = Reader(payload)
    skip_all_headers(r)
    kind = r.unpack("<H")
    if kind == TM_BEGIN:
        isolation = r.byte()
        name = r.b_varchar() if not r.at_end else ""
        return TransactionRequest(kind, isolation, name)
    if kind in (TM_COMMIT, TM_ROLLBACK):
        name = r.b_varchar() if not r.at_end else ""
        flags = r.byte() if not r.at_end else 0
        begin_isolation = r.byte() if flags & 1 and not r.at_end else 0
        return TransactionRequest(kind, 0, name, bool(flags & 1), begin_isolation)
    if kind == TM_SAVE:
        return TransactionRequest(kind, 0, r.b_varchar())
    return TransactionRequest(kind)


_DECLARED_RE = re.compile(r"@([A-Za-z_#$][\w#$@]*)")


def declared_names(declaration: str | None) -> list[str]:
    """Parameter names of an ``@params`` declaration (``@P1 int,@P2 nvarchar(10) OUTPUT``)."""
    return [m.group(1) for m in _DECLARED_RE.finditer(declaration or "")]


def bind_named(sql: str, values: dict[str, Any]) -> tuple[str, list[Any]]:
    """``sql`` with each ``@name`` found in ``values`` (case-insensitive) replaced by ``?``,
    and the values in placeholder order. Strings, quoted names and comments are left alone."""
    lowered = {k.lower(): v for k, v in values.items()}
    out: list[str] = []
    params: list[Any] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'" or c == '"' or c == "[":
            close = {"'": "'", '"': '"', "[": "]"}[c]
            j = i + 1
            while j < n:
                if sql[j] == close:
                    if j + 1 < n and sql[j + 1] == close:
                        j += 2
                        continue
                    break
                j += 1
            out.append(sql[i : j + 1])
            i = j + 1
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            j = n if j < 0 else j
            out.append(sql[i:j])
            i = j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(sql[i:j])
            i = j
        elif c == "@" and not sql.startswith("@@", i) and (i == 0 or sql[i - 1] != "@"):
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_#$"):
                j += 1
            name = sql[i + 1 : j].lower()
            if name in lowered:
                out.append("?")
                params.append(lowered[name])
            else:
                out.append(sql[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), params
