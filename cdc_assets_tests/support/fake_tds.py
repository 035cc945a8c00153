"""A fake SQL Server that speaks just enough TDS 7.x to refuse a login.

It lets the real ODBC path (pyodbc, unixODBC, the FreeTDS driver) run up to and including the
login without a SQL Server: PRELOGIN is answered with "encryption not supported", the LOGIN7
packet is decoded (so a test can check what the client really sent, the password included) and
answered with ERROR tokens and a DONE token, like a server that refuses the login.

Protocol references ([MS-TDS], https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-tds/):

- packet header: 2.2.3.1 (``.../7af53667-1b72-4703-8258-7984e838f746``);
- PRELOGIN: 2.2.6.5 (``.../60f56408-0188-4cd5-8b90-25c6f2423868``);
- LOGIN7: 2.2.6.4 (``.../773a62b6-ee89-4c02-9e5e-344882630aac``), password encoding included;
- ERROR token: 2.2.7.10 (``.../9805e9fa-1f8b-4cf8-8f78-8d2602228635``);
- DONE token: 2.2.7.6 (``.../3c06f110-98bd-4d5b-b836-b1ba66452cb7``).

What FreeTDS accepts is in its ``src/tds/login.c`` (``tds71_do_login``): without a MARS option in
the PRELOGIN reply FreeTDS 1.4+ falls back to TDS 7.1, whose ERROR and DONE tokens are shorter, so
the reply carries MARS = off and the token layout follows the version the LOGIN7 asked for.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

Outcome = Literal["login_failed", "database_missing"]

PRELOGIN, LOGIN7, REPLY = 0x12, 0x10, 0x04  # packet types
EOM = 0x01  # status bit: last packet of the message
ENCRYPT_NOT_SUP = 0x02
SERVER_NAME = "FAKETDS"

# What the tests log in with. No '}': FreeTDS before 1.4 alters such passwords, which the
# project refuses (test_freetds_login); braces are still needed for ';', '{' and '='.
SECRET = "Hunter2;{pw=Xq7Z"
FRAGMENT = "pw=Xq7"  # a distinctive piece, in case something quotes part of it
PASSWORD_ENV = "CDC_TEST_FAKE_TDS_PASSWORD"
USER = "cdc_reader"


def has_freetds() -> bool:
    """pyodbc imports (libodbc is there) and lists the FreeTDS driver (``make setup`` installs
    both)."""
    try:
        import pyodbc
    except ImportError:
        return False
    return "FreeTDS" in pyodbc.drivers()


@dataclass(frozen=True)
class Login:
    """What one LOGIN7 packet carried (the password decoded)."""

    tds_version: int
    host_name: str
    user_name: str
    password: str
    app_name: str
    server_name: str
    database: str


def decode_password(data: bytes) -> str:
    """Undo the LOGIN7 password obfuscation: per byte XOR 0xA5, then swap the nibbles."""
    plain = bytes((((b ^ 0xA5) << 4) & 0xF0) | ((b ^ 0xA5) >> 4) for b in data)
    return plain.decode("utf-16-le")


def parse_login7(payload: bytes) -> Login:
    """The fixed part's (offset, character count) pairs; offsets count from the payload start."""

    def text(position: int, *, password: bool = False) -> str:
        offset, chars = struct.unpack_from("<HH", payload, position)
        raw = payload[offset : offset + 2 * chars]
        return decode_password(raw) if password else raw.decode("utf-16-le")

    (tds_version,) = struct.unpack_from("<I", payload, 4)
    return Login(
        tds_version=tds_version,
        host_name=text(36),
        user_name=text(40),
        password=text(44, password=True),
        app_name=text(48),
        server_name=text(52),
        database=text(68),
    )


def packet(kind: int, payload: bytes) -> bytes:
    """One packet: type, status (EOM), length (big-endian, header included), spid, id, window."""
    return struct.pack(">BBHHBB", kind, EOM, 8 + len(payload), 0, 1, 0) + payload


def prelogin_reply() -> bytes:
    """VERSION 16.0.1000.0, ENCRYPTION = ENCRYPT_NOT_SUP, MARS = off; option offsets count from
    the payload start, after the three 5-byte option headers and the 0xFF terminator."""
    options = [
        (0x00, bytes([16, 0, 0x03, 0xE8, 0, 0])),
        (0x01, bytes([ENCRYPT_NOT_SUP])),
        (0x04, b"\x00"),
    ]
    offset, headers, data = 5 * len(options) + 1, b"", b""
    for token, value in options:
        headers += struct.pack(">BHH", token, offset + len(data), len(value))
        data += value
    return headers + b"\xff" + data


def error_token(number: int, state: int, severity: int, message: str, *, wide: bool) -> bytes:
    """ERROR (0xAA): USHORT length, LONG number, BYTE state, BYTE class, US_VARCHAR message,
    B_VARCHAR server, B_VARCHAR procedure, line number (LONG since TDS 7.2, USHORT before)."""
    text = message.encode("utf-16-le")
    body = struct.pack("<iBBH", number, state, severity, len(text) // 2) + text
    body += bytes([len(SERVER_NAME)]) + SERVER_NAME.encode("utf-16-le") + b"\x00"
    body += struct.pack("<i", 1) if wide else struct.pack("<H", 1)
    return struct.pack("<BH", 0xAA, len(body)) + body


def done_error(*, wide: bool) -> bytes:
    """DONE (0xFD) with status DONE_ERROR; the row count is a ULONGLONG since TDS 7.2."""
    return struct.pack("<BHHQ" if wide else "<BHHI", 0xFD, 0x0002, 0, 0)


def refusal(login: Login, outcome: Outcome) -> bytes:
    wide = login.tds_version >= 0x72000000
    tokens = b""
    if outcome == "database_missing":
        text = f'Cannot open database "{login.database}" requested by the login. The login failed.'
        tokens += error_token(4060, 1, 11, text, wide=wide)
    tokens += error_token(18456, 1, 14, f"Login failed for user '{login.user_name}'.", wide=wide)
    return tokens + done_error(wide=wide)


@dataclass
class FakeTdsServer:
    """Serves 127.0.0.1 on an ephemeral port in a daemon thread while used as a context manager.

    ``logins`` holds every decoded LOGIN7, ``client_encryption`` the ENCRYPTION byte of every
    PRELOGIN, ``failures`` what went wrong inside the server (a test should assert it is empty).
    """

    outcome: Outcome = "login_failed"
    logins: list[Login] = field(default_factory=list)
    client_encryption: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        assert self._listener is not None, "the server is not started"
        return int(self._listener.getsockname()[1])

    def __enter__(self) -> FakeTdsServer:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        threading.Thread(target=self._serve, name="fake-tds", daemon=True).start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by __exit__
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                kind, payload = read_message(conn)
                if kind != PRELOGIN:
                    raise ValueError(f"expected PRELOGIN (0x12), got packet type {kind:#04x}")
                self.client_encryption.append(prelogin_option(payload, 0x01)[0])
                conn.sendall(packet(REPLY, prelogin_reply()))
                kind, payload = read_message(conn)
                if kind != LOGIN7:
                    raise ValueError(f"expected LOGIN7 (0x10), got packet type {kind:#04x}")
                login = parse_login7(payload)
                self.logins.append(login)
                conn.sendall(packet(REPLY, refusal(login, self.outcome)))
            except (EOFError, ConnectionError):
                pass  # the client hung up (e.g. it wanted encryption and got none)
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")


def read_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the client closed the connection")
        data += chunk
    return data


def read_message(conn: socket.socket) -> tuple[int, bytes]:
    """One message: the payloads of its packets up to the one with the EOM status bit."""
    payload = b""
    while True:
        kind, status, length = struct.unpack(">BBH", read_exact(conn, 8)[:4])
        payload += read_exact(conn, length - 8)
        if status & EOM:
            return kind, payload


def prelogin_option(payload: bytes, token: int) -> bytes:
    """The value of a PRELOGIN option (5-byte headers: token, offset, length; big-endian)."""
    position = 0
    while payload[position] != 0xFF:
        kind, offset, length = struct.unpack_from(">BHH", payload, position)
        if kind == token:
            return payload[offset : offset + length]
        position += 5
    raise ValueError(f"PRELOGIN without option {token:#04x}")
