"""A Spark Connect server started from the pyspark distribution, for runs to attach to.

A run that starts its own Spark driver spends most of a small range's time starting it (~10-20 s
on 2 cores); a long-running Connect server keeps Spark warm and a run attaches in about a second
(``spark.remote: sc://host:port``). The pyspark wheel ships the server (``spark-connect`` jar)
but no start script, so it is started as::

    spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer spark-internal

with the project's session settings (:func:`.session.session_conf`: the defaults, Delta Lake's
jars and extension, and ``spark.conf`` of the config), a persistent session catalog (a Hive
metastore beside a local storage base, :mod:`.table_names`: the server is the one process that
opens it) and bound to 127.0.0.1 unless told
otherwise (it would listen on every interface). The Python data source runs in the server's
Python workers, so the server must run with the project's interpreter (``PYSPARK_PYTHON``, set
here to this one unless set).

    python -m cdc_assets.spark.connect_server [--config cdc_assets.yaml]   # runs the server
    python -m cdc_assets.spark.connect_server --wait   # returns once it listens
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

from cdc_assets.process_group import die_with_parent, port_free
from cdc_assets.spark_connect_address import SPARK_CONNECT_PORT, spark_connect_address

from .session import remote_url, session_conf, use_this_python_for_workers
from .table_names import metastore_folder, metastore_settings

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = SPARK_CONNECT_PORT


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
    storage_path: str | None = None,
    metastore: Path | None = None,
) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``host:port``; ``metastore``:
    the folder of its persistent session catalog (:func:`.table_names.metastore_settings`;
    the settings in ``conf`` win)."""
    settings = {
        "spark.log.level": "WARN",  # not INFO lines for every client request in its log
        **with_metastore(session_conf(conf, storage_path=storage_path), metastore),
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
    }
    argv = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS]
    argv += ["--name", "cdc_assets Spark Connect", "--master", master]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, "spark-internal"]


def with_metastore(settings: dict[str, str], metastore: Path | None) -> dict[str, str]:
    """``settings`` with a persistent session catalog in ``metastore`` where they set none."""
    if metastore is None:
        return settings
    metastore.mkdir(parents=True, exist_ok=True)  # Derby's home (its log) must exist
    merged = dict(settings)
    for key, value in metastore_settings(metastore).items():
        if key == "spark.driver.extraJavaOptions" and merged.get(key):
            merged[key] = f"{merged[key]} {value}"
        else:
            merged.setdefault(key, value)
    return merged


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
    storage_path: str | None = None,
    metastore: Path | None = None,
    log: Path | None = None,
    timeout_s: float = 120.0,
) -> subprocess.Popen[bytes]:
    """Start a server in its own process group and wait until it listens; the caller stops it
    (:func:`stop`); it gets SIGTERM if the caller's process dies first."""
    use_this_python_for_workers()
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    process = subprocess.Popen(
        server_command(
            port=port,
            host=host,
            master=master,
            conf=conf,
            storage_path=storage_path,
            metastore=metastore,
        ),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # a starter killed (kill -9) leaves no server behind
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
    parser = argparse.ArgumentParser(
        description="Run a Spark Connect server for cdc_assets, on the address spark.remote of "
        "the config (or CDC_ASSETS_SPARK_REMOTE) names (default 127.0.0.1:15002), with its "
        "spark.master and spark.conf."
    )
    parser.add_argument("--config", default=None, help="the project config (default: as usual)")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--host", default=None)
    parser.add_argument(
        "--wait", action="store_true", help="only wait until the server listens (exit 1 if not)"
    )
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)

    from cdc_assets.config import load_config

    config = load_config(args.config)
    host, port = spark_connect_address(remote_url(config.spark.remote)) or (
        "127.0.0.1",
        DEFAULT_PORT,
    )
    host, port = args.host or host, args.port or port
    if args.wait:
        try:
            wait_until_listening(host, port, timeout_s=args.timeout)
        except TimeoutError as exc:
            print(f"connect_server: {exc}", file=sys.stderr)
            return 1
        return 0
    if not port_free(host, port):
        print(
            f"connect_server: {host}:{port} is in use: stop what listens there, or point "
            "spark.remote of the config at another port",
            file=sys.stderr,
        )
        return 2
    use_this_python_for_workers()
    command = server_command(
        port=port,
        host=host,
        master=config.spark.master,
        conf=config.spark.conf,
        storage_path=str(config.storage.base_path),
        # the session catalog the runs register the tables in, kept beside them
        metastore=metastore_folder(str(config.storage.base_path)),
    )
    sys.stdout.flush()
    os.execv(command[0], command)  # the server replaces this process: a signal reaches the JVM
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
