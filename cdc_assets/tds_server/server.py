"""The TDS server: a listening socket and one thread per client connection.

``TdsServer(path, logins={...}).start()`` serves the emulator database at ``path`` on
``host:port`` (port 0: a free one, see :attr:`TdsServer.port`) to any SQL Server client
(ODBC Driver 18, FreeTDS, python-tds, sqlcmd); ``stop()`` closes the listener and every client.
TLS uses a self-signed certificate made at start with the ``openssl`` command, so clients connect
with ``Encrypt=yes;TrustServerCertificate=yes`` (or without encryption).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from .client import ClientConnection, ServedDatabase
from .login import LoginAttempt

log = logging.getLogger(__name__)

DEFAULT_USER = "sa"


def self_signed_context(common_name: str = "localhost") -> ssl.SSLContext | None:
    """A server TLS context with a fresh self-signed certificate, or None without ``openssl``.

    TLS 1.2 at most: with TDS 7.x the handshake travels inside PRELOGIN packets, and TLS 1.3
    session tickets sent after the handshake would land in the first TDS message.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        log.warning("openssl not found: the TDS server offers no encryption")
        return None
    with tempfile.TemporaryDirectory(prefix="cdc-tds-") as tmp:
        key, cert = Path(tmp) / "key.pem", Path(tmp) / "cert.pem"
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                str(key),
                "-out",
                str(cert),
                "-days",
                "30",
                "-subj",
                f"/CN={common_name}",
                "-addext",
                f"subjectAltName=DNS:{common_name},IP:127.0.0.1",
            ],
            check=True,
            capture_output=True,
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class TdsServer:
    """Serves one emulator database over TDS 7.4."""

    def __init__(
        self,
        path: str | Path,
        *,
        logins: Mapping[str, str],
        database: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: bool | ssl.SSLContext = True,
        lock_timeout: float = 30.0,
        login_timeout: float = 10.0,
        max_connections: int = 200,
    ) -> None:
        if not logins:
            raise ValueError("the TDS server needs at least one login (user and password)")
        self.path = str(path)
        self.logins = dict(logins)
        self.database = database or Path(path).stem
        self.host = host
        self._requested_port = port
        if isinstance(tls, ssl.SSLContext):
            self.tls_context: ssl.SSLContext | None = tls
        else:
            self.tls_context = self_signed_context() if tls else None
        self.lock_timeout = lock_timeout
        self.login_timeout = login_timeout
        self.max_connections = max_connections
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._clients: dict[int, ClientConnection] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._tran_ids = itertools.count(1)
        self._stopping = threading.Event()
        self.login_attempts: deque[LoginAttempt] = deque(maxlen=100)  # the latest, for operators
        self._served = ServedDatabase(
            path=self.path,
            database=self.database,
            logins=self.logins,
            tls_context=self.tls_context,
            lock_timeout=self.lock_timeout,
            login_timeout=self.login_timeout,
            record_login=self.login_attempts.append,
            next_transaction_id=self.next_transaction_id,
        )

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("the TDS server is not started")
        port: int = self._listener.getsockname()[1]
        return port

    def next_transaction_id(self) -> int:
        with self._lock:
            return next(self._tran_ids)

    def start(self) -> TdsServer:
        listener = socket.create_server((self.host, self._requested_port), backlog=128)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, name="tds-accept", daemon=True)
        self._thread.start()
        log.info("TDS server for %s on %s:%d", self.path, self.host, self.port)
        return self

    def serve_forever(self) -> None:
        """Start (if needed) and block until :meth:`stop` or Ctrl-C."""
        if self._listener is None:
            self.start()
        try:
            self._stopping.wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if len(self._clients) >= self.max_connections:
                    sock.close()  # a login flood: refuse, keep serving the others
                    continue
                number = next(self._ids)
                client = ClientConnection(self._served, sock)
                self._clients[number] = client
            threading.Thread(
                target=self._serve, args=(number, client), name=f"tds-{number}", daemon=True
            ).start()

    def _serve(self, number: int, client: ClientConnection) -> None:
        try:
            client.serve()
        finally:
            with self._lock:
                self._clients.pop(number, None)

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._clients)

    def stop(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            clients = list(self._clients.values())
        for client in clients:
            with contextlib.suppress(OSError):
                client.sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> TdsServer:
        return self.start() if self._listener is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
