"""Microsoft's JDBC driver against the TDS server: the small Java program the tests run.

``jdbc/JdbcProbe.java`` connects through mssql-jdbc (fetched at install time by
scripts/install_jars.sh into ``<prefix>/share/cdc_assets/jars-jdbc``, never at test time) and
prints JSON; :func:`compile_probe` compiles it with ``javac``, :func:`run_probe` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdc_assets_tests.support.tds import DATABASE, PASSWORD, USER

JAR_NAME = "mssql-jdbc-13.6.2.jre11.jar"
SOURCE = Path(__file__).with_name("jdbc") / "JdbcProbe.java"


def jar_path() -> Path:
    return Path(sys.prefix) / "share" / "cdc_assets" / "jars-jdbc" / JAR_NAME


def compile_probe(target: Path) -> Path:
    """Compile JdbcProbe.java into ``target``; the classes folder."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-d", str(target), str(SOURCE)], check=True, capture_output=True, timeout=120
    )
    return target


def url(port: int, *, database: str = DATABASE) -> str:
    # the password has ';' and '{': braced, as mssql-jdbc's connection string grammar wants
    password = "{" + PASSWORD.replace("}", "}}") + "}"
    return (
        f"jdbc:sqlserver://127.0.0.1:{port};databaseName={database};encrypt=true;"
        f"trustServerCertificate=true;user={USER};password={password};loginTimeout=10"
    )


def run_probe(classes: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run JdbcProbe with ``args``; its JSON (a failure exits with status 2 and an error)."""
    done = subprocess.run(
        ["java", "-cp", f"{jar_path()}:{classes}", "JdbcProbe", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode not in (0, 2) or not done.stdout.strip():
        raise AssertionError(f"JdbcProbe failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)
