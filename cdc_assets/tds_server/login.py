"""PRELOGIN and LOGIN7: what the client asks for, and the server's answer.

Encryption: a client that asks for it (ENCRYPT_ON or ENCRYPT_REQ, e.g. ODBC Driver 18 with
``Encrypt=yes``) gets TLS for the whole session, its handshake carried inside PRELOGIN packets;
a client that does not (ENCRYPT_OFF or ENCRYPT_NOT_SUP) is answered ENCRYPT_NOT_SUP and nothing
is encrypted (ENCRYPT_OFF would oblige the server to encrypt the login packet).

[MS-TDS] 2.2.6.5 (PRELOGIN), 2.2.6.4 (LOGIN7, password obfuscation), 3.3.5.1 (TLS in PRELOGIN).
"""

from __future__ import annotations

import ssl
import struct
from dataclasses import dataclass

from .wire import PRELOGIN, ProtocolError, Transport, read_message

ENCRYPT_OFF, ENCRYPT_ON, ENCRYPT_NOT_SUP, ENCRYPT_REQ = 0, 1, 2, 3
_VERSION = bytes([16, 0, 0x10, 0x1D, 0, 0])  # 16.0.4125: SQL Server 2022


def parse_prelogin(payload: bytes) -> dict[int, bytes]:
    """Option token -> value; offsets count from the payload start."""
    options: dict[int, bytes] = {}
    pos = 0
    while True:
        if pos >= len(payload):
            raise ProtocolError("PRELOGIN has no terminator")
        token = payload[pos]
        if token == 0xFF:
            return options
        if pos + 5 > len(payload):
            raise ProtocolError("PRELOGIN option header is cut")
        offset, length = struct.unpack_from(">HH", payload, pos + 1)
        if offset + length > len(payload):
            raise ProtocolError("PRELOGIN option points past the packet")
        options[token] = payload[offset : offset + length]
        pos += 5


def prelogin_reply(encryption: int) -> bytes:
    options = [(0x00, _VERSION), (0x01, bytes([encryption])), (0x02, b"\x00"), (0x04, b"\x00")]
    offset, headers, data = 5 * len(options) + 1, b"", b""
    for token, value in options:
        headers += struct.pack(">BHH", token, offset + len(data), len(value))
        data += value
    return headers + b"\xff" + data


def negotiate(requested: int, context: ssl.SSLContext | None) -> int:
    """The ENCRYPTION answer: ON when the client wants TLS and the server has a certificate."""
    if requested in (ENCRYPT_ON, ENCRYPT_REQ) and context is not None:
        return ENCRYPT_ON
    return ENCRYPT_NOT_SUP


def tls_handshake(transport: Transport, context: ssl.SSLContext) -> None:
    """The TLS handshake inside PRELOGIN packets; afterwards all traffic is TLS records."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    while True:
        try:
            tls.do_handshake()
            finished = True
        except ssl.SSLWantReadError:
            finished = False
        except ssl.SSLError as exc:
            raise ProtocolError(f"TLS handshake failed: {exc.reason}") from None
        data = outgoing.read()
        if data:
            transport.sendall(_prelogin_packets(data))
        if finished:
            break
        kind, _, payload = read_message(transport)
        if kind != PRELOGIN:
            raise ProtocolError("expected a TLS handshake in a PRELOGIN packet")
        incoming.write(payload)
    transport.start_tls(tls, incoming, outgoing)


def _prelogin_packets(data: bytes) -> bytes:
    """The handshake travels in PRELOGIN packets in both directions."""
    room = 4096 - 8
    chunks = [data[i : i + room] for i in range(0, len(data), room)] or [b""]
    out = []
    for n, chunk in enumerate(chunks):
        status = 1 if n == len(chunks) - 1 else 0
        out.append(struct.pack(">BBHHBB", PRELOGIN, status, len(chunk) + 8, 0, n + 1, 0) + chunk)
    return b"".join(out)


@dataclass
class LoginAttempt:
    """One client's PRELOGIN and LOGIN7 as the server saw them (never the password); filled in
    as the login goes on."""

    encryption: int  # asked for in PRELOGIN: 0 off, 1 on, 2 not supported, 3 required
    user: str | None = None  # None: the client hung up before LOGIN7
    database: str | None = None
    app_name: str | None = None
    tds_version: int | None = None
    accepted: bool = False


@dataclass(frozen=True)
class Login7:
    """What one LOGIN7 carried (the password decoded)."""

    tds_version: int
    packet_size: int
    user: str
    password: str
    app_name: str
    database: str
    feature_ext: bool


def _decode_password(data: bytes) -> str:
    plain = bytes((((b ^ 0xA5) << 4) & 0xF0) | ((b ^ 0xA5) >> 4) for b in data)
    return plain.decode("utf-16-le", errors="replace")


def parse_login7(payload: bytes) -> Login7:
    if len(payload) < 94:
        raise ProtocolError("LOGIN7 is shorter than its fixed part")

    def text(position: int, *, password: bool = False) -> str:
        offset, chars = struct.unpack_from("<HH", payload, position)
        raw = payload[offset : offset + 2 * chars]
        if len(raw) != 2 * chars:
            raise ProtocolError("LOGIN7 field points past the packet")
        return _decode_password(raw) if password else raw.decode("utf-16-le", errors="replace")

    tds_version, packet_size = struct.unpack_from("<II", payload, 4)
    return Login7(
        tds_version=tds_version,
        packet_size=packet_size,
        user=text(40),
        password=text(44, password=True),
        app_name=text(48),
        database=text(68),
        feature_ext=bool(payload[27] & 0x10),
    )
