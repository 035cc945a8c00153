"""A Spark Connect server started from the pyspark distribution, for runs to attach to.

A run that starts its own Spark driver spends most of a small range's time starting it (~10-20 s
on 2 cores); a long-running Connect server keeps Spark warm and a run attaches in about a second
(``spark.remote: sc://host:port``). The pyspark wheel ships the server (``spark-connect`` jar)
but no start script, so it is started as::

    spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal

with the project's session settings (:data:`.session.DEFAULT_CONF` and ``spark.conf`` of the
config) and bound to 127.0.0.1 unless told otherwise (it would listen on every interface). The
Python data source runs in the server's Python workers, so the server must run with the
project's interpreter (``PYSPARK_PYTHON``, set here to this one unless set).

    python -m cdc_assets.spark.connect_server --port 15002 [--config cdc_assets.yaml]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .session import DEFAULT_CONF, use_this_python_for_workers

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002


def spark_home() -> Path:
    """The pyspark distribution's Spark home (``bin/spark-submit`` and the jars)."""
    import pyspark

    return Path(pyspark.__file__).parent


def server_command(
    *,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``host:port``."""
    settings = {
        **DEFAULT_CONF,
        **(conf or {}),
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    argv = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    argv += ["--name", "cdc_assets Spark Connect", "--master", master]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, "spark-internal"]


def wait_until_listening(host: str, port: int, *, timeout_s: float = 120.0) -> None:
    """Block until ``host:port`` accepts connections; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the Spark Connect server did not listen on {host}:{port} within "
                    f"{timeout_s:g} s; see its log"
                ) from None
            time.sleep(0.25)


def start(
    *,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    log: Path | None = None,
    timeout_s: float = 120.0,
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group and wait until it listens; the caller stops it
    (``os.killpg(process.pid, SIGTERM)``)."""
    use_this_python_for_workers()
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        server_command(port=port, host=host, master=master, conf=conf),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the Spark Connect server exited with {process.returncode} before it "
                    f"listened on {host}:{port}" + (f"; see {log}" if log else "")
                )
            try:
                wait_until_listening(host, port, timeout_s=0.5)
                return process
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise
    except BaseException:
        stop(process)
        raise


def stop(process: subprocess.Popen[bytes], *, timeout_s: float = 30.0) -> None:
    """Stop a server :func:`start` started (its whole process group: the JVM and its Python
    workers)."""
    import signal

    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a Spark Connect server for cdc_assets.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--master", default=None, help="default: spark.master of the config")
    parser.add_argument("--config", default=None, help="the project config (its spark section)")
    args = parser.parse_args(argv)
    master, conf = "local[*]", {}
    if args.config is not None or os.environ.get("CDC_ASSETS_CONFIG"):
        from cdc_assets.config import load_config

        config = load_config(args.config)
        master, conf = config.spark.master, dict(config.spark.conf)
    use_this_python_for_workers()
    command = server_command(
        port=args.port, host=args.host, master=args.master or master, conf=conf
    )
    sys.stdout.flush()
    os.execv(command[0], command)  # the server replaces this process: a signal reaches the JVM
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
