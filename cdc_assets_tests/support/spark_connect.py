"""A Spark Connect server for a test, started as ``make demo`` starts its own
(:mod:`cdc_assets.spark.connect_server`): runs attach to it instead of each starting a driver."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cdc_assets.spark import connect_server
from cdc_assets_tests.support.jvm import FAST_JVM
from cdc_assets_tests.support.net import free_port


@dataclass(frozen=True)
class ConnectServer:
    url: str  # what spark.remote names
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, chars: int = 2000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@contextmanager
def connect_server_for(
    tmp: Path, *, memory: str = "768m", metastore: Path | None = None
) -> Iterator[ConnectServer]:
    """A server on a free loopback port (local[2], a driver JVM that starts fast), its log in
    ``tmp/connect-server.log``; stopped with its process group on exit. ``metastore``: its
    persistent session catalog's folder (else an in-memory one, its warehouse in ``tmp``)."""
    port = free_port()
    log = tmp / "connect-server.log"
    process = connect_server.start(
        port=port,
        master="local[2]",
        conf={
            "spark.driver.extraJavaOptions": FAST_JVM,
            "spark.driver.memory": memory,
            "spark.sql.warehouse.dir": str(tmp / "spark-warehouse"),
        },
        metastore=metastore,
        log=log,
        timeout_s=180,
    )
    try:
        yield ConnectServer(f"sc://127.0.0.1:{port}", process, log)
    finally:
        connect_server.stop(process)
