"""TDS packets over a socket (plain or TLS) and the response tokens the server writes.

A message is one or more packets: an 8-byte header (type, status, big-endian length including
the header, SPID, packet id, window) and a payload; the last packet has status bit EOM.
Responses are written through :class:`ResponseWriter`, which cuts them into packets of the
negotiated size as they are produced, so a large result set never sits in memory whole.

[MS-TDS] 2.2.3 (packets), 2.2.7 (tokens: DONE 2.2.7.6, ENVCHANGE 2.2.7.9, ERROR 2.2.7.10,
INFO 2.2.7.13, LOGINACK 2.2.7.14, COLMETADATA 2.2.7.4, ROW 2.2.7.19, NBCROW 2.2.7.15,
RETURNSTATUS 2.2.7.18, RETURNVALUE 2.2.7.19).
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
from collections.abc import Sequence
from typing import Any

from .datatypes import WireColumn

# packet types
SQL_BATCH, RPC, REPLY, ATTENTION, TRANSACTION_MANAGER, LOGIN7, PRELOGIN = 1, 3, 4, 6, 14, 16, 18
EOM = 0x01
RESET_CONNECTION = 0x08
HEADER = struct.Struct(">BBHHBB")
MIN_PACKET, MAX_PACKET = 512, 32767
MAX_MESSAGE = 64 * 1024 * 1024  # a request larger than this closes the connection

# DONE status bits
DONE_FINAL, DONE_MORE, DONE_ERROR, DONE_INXACT, DONE_COUNT, DONE_ATTN = 0, 1, 2, 4, 0x10, 0x20
DONE, DONEPROC, DONEINPROC = 0xFD, 0xFE, 0xFF
SERVER_NAME = "cdc_assets_emulator"


class ProtocolError(Exception):
    """The client broke the protocol: the connection is closed (others keep being served)."""


class ClientGone(Exception):
    """The client closed the connection."""


class Transport:
    """Bytes to and from the client: the socket, or TLS over it once negotiated."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._tls: ssl.SSLObject | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._buffer = bytearray()

    def start_tls(self, tls: ssl.SSLObject, incoming: ssl.MemoryBIO, out: ssl.MemoryBIO) -> None:
        self._tls, self._incoming, self._outgoing = tls, incoming, out

    def _fill(self) -> None:
        if self._tls is None:
            data = self.sock.recv(65536)
            if not data:
                raise ClientGone
            self._buffer += data
            return
        while True:
            try:
                self._buffer += self._tls.read(65536)
                return
            except ssl.SSLWantReadError:
                data = self.sock.recv(65536)
                if not data:
                    raise ClientGone from None
                self._incoming.write(data)
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                raise ClientGone from None

    def recv_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            self._fill()
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def sendall(self, data: bytes) -> None:
        if self._tls is not None:
            self._tls.write(data)
            data = self._outgoing.read()
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ClientGone from exc

    def readable_now(self) -> bool:
        """Whether the client has sent something (an ATTENTION) that can be read at once."""
        if self._buffer or (self._tls is not None and self._tls.pending()):
            return True
        # poll, not select: select() refuses descriptors above 1023, which a busy process has
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        return bool(poller.poll(0))


def read_message(transport: Transport) -> tuple[int, int, bytes]:
    """(type, status of the first packet, payload) of the next whole message."""
    parts: list[bytes] = []
    size = 0
    kind = status0 = -1
    while True:
        kind_i, status, length, _, _, _ = HEADER.unpack(transport.recv_exact(8))
        if length < 8 or length > MAX_PACKET + 1:
            raise ProtocolError(f"packet length {length} is out of range")
        if kind == -1:
            kind, status0 = kind_i, status
        elif kind_i != kind:
            raise ProtocolError("a message mixes packet types")
        payload = transport.recv_exact(length - 8)
        size += len(payload)
        if size > MAX_MESSAGE:
            raise ProtocolError("the request is larger than the server accepts")
        parts.append(payload)
        if status & EOM:
            return kind, status0, b"".join(parts)


class Cancelled(Exception):
    """The client sent ATTENTION while a result was being sent."""


class ResponseWriter:
    """Writes one response (tokens) as packets of ``packet_size``; checks for ATTENTION."""

    def __init__(self, transport: Transport, packet_size: int, kind: int = REPLY) -> None:
        self.transport = transport
        self.packet_size = packet_size
        self.kind = kind
        self._buffer = bytearray()
        self._packet_id = 1
        self.attention = False

    def write(self, data: bytes) -> None:
        self._buffer += data
        room = self.packet_size - 8
        if len(self._buffer) > room:
            self._flush_full(room)

    def _flush_full(self, room: int) -> None:
        chunks = []
        while len(self._buffer) > room:
            chunks.append(self._packet(bytes(self._buffer[:room]), 0))
            del self._buffer[:room]
        self.transport.sendall(b"".join(chunks))
        if not self.attention and self.transport.readable_now():
            kind, _, _ = read_message(self.transport)
            if kind == ATTENTION:
                self.attention = True
                raise Cancelled
            raise ProtocolError(f"a request (type {kind}) arrived while a result was sent")

    def _packet(self, payload: bytes, status: int) -> bytes:
        header = HEADER.pack(self.kind, status, len(payload) + 8, 0, self._packet_id, 0)
        self._packet_id = (self._packet_id + 1) % 256
        return header + payload

    def finish(self) -> None:
        room = self.packet_size - 8
        chunks = []
        while len(self._buffer) > room:
            chunks.append(self._packet(bytes(self._buffer[:room]), 0))
            del self._buffer[:room]
        chunks.append(self._packet(bytes(self._buffer), EOM))
        self._buffer.clear()
        self.transport.sendall(b"".join(chunks))


# -- tokens ---------------------------------------------------------------------------------------


def _b_varchar(text: str) -> bytes:
    data = text.encode("utf-16-le")
    return bytes([len(data) // 2]) + data


def _us_varchar(text: str) -> bytes:
    data = text.encode("utf-16-le")
    return struct.pack("<H", len(data) // 2) + data


def done(status: int, rowcount: int = 0, token: int = DONE, command: int = 0) -> bytes:
    return struct.pack("<BHHQ", token, status, command, max(rowcount, 0))


def message(number: int, state: int, severity: int, text: str, *, proc: str = "") -> bytes:
    """ERROR (class above 10) or INFO token."""
    body = struct.pack("<iBB", number, state, severity) + _us_varchar(text[:4000])
    body += _b_varchar(SERVER_NAME) + _b_varchar(proc[:128]) + struct.pack("<i", 1)
    token = 0xAA if severity > 10 else 0xAB
    return struct.pack("<BH", token, len(body)) + body


def envchange_text(kind: int, new: str, old: str) -> bytes:
    body = bytes([kind]) + _b_varchar(new) + _b_varchar(old)
    return struct.pack("<BH", 0xE3, len(body)) + body


def envchange_bytes(kind: int, new: bytes, old: bytes) -> bytes:
    body = bytes([kind, len(new)]) + new + bytes([len(old)]) + old
    return struct.pack("<BH", 0xE3, len(body)) + body


def loginack(program: str = "Microsoft SQL Server") -> bytes:
    body = b"\x01" + struct.pack(">I", 0x74000004) + _b_varchar(program) + bytes([16, 0, 4, 0x1D])
    return struct.pack("<BH", 0xAD, len(body)) + body


def colmetadata(columns: Sequence[WireColumn]) -> bytes:
    parts = [struct.pack("<BH", 0x81, len(columns))]
    for column in columns:
        parts.append(struct.pack("<IH", 0, 0x0001))  # user type, flags: nullable
        parts.append(column.type_info)
        parts.append(_b_varchar(column.name[:128]))
    return b"".join(parts)


def row(columns: Sequence[WireColumn], values: Sequence[Any]) -> bytes:
    """ROW, or NBCROW (null bitmap, NULL columns left out) when a value is NULL."""
    if None not in values:
        return b"\xd1" + b"".join([c.encode(v) for c, v in zip(columns, values, strict=True)])
    bitmap = bytearray((len(columns) + 7) // 8)
    parts = []
    for i, (column, value) in enumerate(zip(columns, values, strict=True)):
        if value is None:
            bitmap[i // 8] |= 1 << (i % 8)
        else:
            parts.append(column.encode(value))
    return b"\xd2" + bytes(bitmap) + b"".join(parts)


def return_status(value: int) -> bytes:
    return struct.pack("<Bi", 0x79, value)


def return_value(ordinal: int, name: str, type_and_value: bytes) -> bytes:
    return (
        struct.pack("<BH", 0xAC, ordinal)
        + _b_varchar(name)
        + b"\x01"  # output parameter
        + struct.pack("<IH", 0, 0x0001)
        + type_and_value
    )
