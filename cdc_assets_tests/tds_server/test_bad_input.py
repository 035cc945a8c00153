"""Bad input on the wire: truncated and oversized packets, unknown packet types and tokens,
malformed logins and requests, a login flood, clients that vanish mid-result. The server answers
with an error or closes that one connection, keeps serving a well-behaved client meanwhile, and
the database is intact. A bounded random fuzz (fixed seed) plus the named cases."""

from __future__ import annotations

import random
import socket
import ssl
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cdc_assets import emulator
from cdc_assets.tds_server import TdsServer
from cdc_assets_tests.support.tds import PASSWORD, USER, wire_connect

ROWS = 3000
# an exception escaping a connection's thread is a failure, not a warning
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def packet(kind: int, payload: bytes, *, status: int = 1, length: int | None = None) -> bytes:
    size = 8 + len(payload) if length is None else length
    return struct.pack(">BBHHBB", kind, status, size, 0, 1, 0) + payload


def prelogin() -> bytes:
    options = [(0x00, bytes(6)), (0x01, b"\x02")]  # VERSION, ENCRYPTION = NOT_SUP
    offset, head, data = 5 * len(options) + 1, b"", b""
    for token, value in options:
        head += struct.pack(">BHH", token, offset + len(data), len(value))
        data += value
    return packet(0x12, head + b"\xff" + data)


def login7(user: str, password: str, database: str) -> bytes:
    def scramble(text: str) -> bytes:
        return bytes(((b << 4) & 0xF0 | (b >> 4)) ^ 0xA5 for b in text.encode("utf-16-le"))

    fields = ["fuzz-host", user, password, "fuzz", "server", "", "", "", database]
    data, pairs, offset = b"", b"", 94
    for n, text in enumerate(fields):
        raw = scramble(text) if n == 2 else text.encode("utf-16-le")
        pairs += struct.pack("<HH", offset + len(data), len(raw) // 2)
        data += raw
    pairs = pairs[:20] + struct.pack("<HH", 0, 0) + pairs[24:]  # no extension block
    fixed = struct.pack("<IIIIII", 0, 0x74000004, 4096, 7, 1, 0) + bytes([0xE0, 0x03, 0, 0])
    fixed += struct.pack("<ii", 0, 0x409)
    tail = bytes(6) + struct.pack("<HHHHHHI", 0, 0, 0, 0, 0, 0, 0)
    body = fixed + pairs + tail + data
    body = struct.pack("<I", len(body)) + body[4:]
    return packet(0x10, body)


def all_headers() -> bytes:
    return struct.pack("<IIHQI", 22, 18, 2, 0, 1)


def batch(sql: str) -> bytes:
    return packet(0x01, all_headers() + sql.encode("utf-16-le"))


def exchange(port: int, *messages: bytes, read: bool = True) -> bytes:
    """Send ``messages`` on a new connection; what came back until the server went quiet."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        for message in messages:
            try:
                sock.sendall(message)
            except OSError:
                break
            if read:
                received += _drain(sock)
    return received


def _drain(sock: socket.socket) -> bytes:
    chunks = []
    sock.settimeout(0.1)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except (TimeoutError, OSError):
        pass
    return b"".join(chunks)


@pytest.fixture
def served(tmp_path: Path, tls_context: ssl.SSLContext) -> Iterator[TdsServer]:
    path = tmp_path / "salesdb.db"
    conn = emulator.connect(path, autocommit=True)
    conn.execute("CREATE TABLE dbo.t (id int PRIMARY KEY, pad nvarchar(200))")
    conn.cursor().executemany(
        "INSERT INTO dbo.t VALUES (?, ?)", [(i, "p" * 200) for i in range(ROWS)]
    )
    conn.close()
    with TdsServer(
        path, logins={USER: PASSWORD}, tls=tls_context, login_timeout=1.0, max_connections=30
    ) as server:
        yield server


def _healthy(server: TdsServer) -> Callable[[], None]:
    """A well-behaved ODBC Driver 18 client kept open through the abuse; checks the data."""
    conn = wire_connect("odbc18", server.port)

    def check() -> None:
        count, total = conn.execute("SELECT COUNT(*), SUM(id) FROM dbo.t").fetchone()
        assert (count, total) == (ROWS, ROWS * (ROWS - 1) // 2)

    check()
    return check


def _logged_in(port: int) -> list[bytes]:
    return [prelogin(), login7(USER, PASSWORD, "salesdb")]


def test_named_bad_inputs(served: TdsServer) -> None:
    check = _healthy(served)
    port = served.port
    login = _logged_in(port)
    cases = {
        "truncated header": [b"\x12\x01\x00"],
        "length below the header": [packet(0x12, b"", length=4)],
        "oversized length": [packet(0x12, b"x" * 100, length=65535)],
        "unknown packet type first": [packet(0x55, b"hello")],
        "garbage prelogin": [packet(0x12, b"\x01\xff\xff\x00\x10")],
        "login before prelogin": [login7(USER, PASSWORD, "salesdb")],
        "short login7": [prelogin(), packet(0x10, b"\x00" * 20)],
        "login7 field past the end": [prelogin(), packet(0x10, b"\xff" * 100)],
        "unknown request type": [*login, packet(0x55, all_headers())],
        "bad all_headers": [*login, packet(0x01, b"\xff\xff\xff\x7f" + b"x" * 8)],
        "odd utf-16 batch": [*login, packet(0x01, all_headers() + b"\x41")],
        "rpc unknown parameter type": [
            *login,
            packet(0x03, all_headers() + b"\xff\xff\x0a\x00\x00\x00\x00\x00\xee\x01\x02"),
        ],
        "rpc cut in a value": [
            *login,
            packet(0x03, all_headers() + b"\xff\xff\x0a\x00\x00\x00\x00\x00\xe7\x40"),
        ],
        "message split with mixed types": [*login, packet(0x01, b"ab", status=0) + packet(3, b"c")],
        "bad transaction request": [*login, packet(0x0E, all_headers() + b"\x07")],
    }
    for name, messages in cases.items():
        exchange(port, *messages)
        check()
        assert served.connection_count <= 30, name
    assert [a.user for a in served.login_attempts if a.accepted].count(USER) >= 1


def test_a_sql_error_keeps_the_session(served: TdsServer) -> None:
    reply = exchange(
        served.port, *_logged_in(served.port), batch("SELEC nonsense"), batch("SELECT 1")
    )
    assert b"\xaa" in reply  # an ERROR token
    assert reply.count(b"\xfd") >= 2  # ... and both batches answered with DONE


def test_client_vanishing_mid_result_and_a_login_flood(served: TdsServer) -> None:
    check = _healthy(served)
    port = served.port
    for _ in range(5):  # asks for every row, reads a little, disappears
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            for message in _logged_in(port):
                sock.sendall(message)
                _drain(sock)
            sock.sendall(batch("SELECT * FROM dbo.t a, dbo.t b"))
            sock.recv(1000)
    check()
    flood = [socket.create_connection(("127.0.0.1", port), timeout=2) for _ in range(40)]
    try:
        check()  # the flood sends nothing; the healthy client is served meanwhile
    finally:
        for sock in flood:
            sock.close()
    check()


def test_bounded_random_fuzz(served: TdsServer) -> None:
    check = _healthy(served)
    rng = random.Random(18)
    port = served.port
    valid = [prelogin(), login7(USER, PASSWORD, "salesdb"), batch("SELECT TOP (5) * FROM dbo.t")]
    for _ in range(40):
        messages = list(valid[: rng.randint(0, 3)])
        blob = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 6)):  # flip, cut or grow
            action = rng.random()
            if action < 0.5 and blob:
                blob[rng.randrange(len(blob))] = rng.randrange(256)
            elif action < 0.8:
                del blob[rng.randrange(len(blob) + 1) :]
            else:
                blob += rng.randbytes(rng.randint(1, 64))
        messages.append(bytes(blob))
        exchange(port, *messages, read=rng.random() < 0.7)
    check()
