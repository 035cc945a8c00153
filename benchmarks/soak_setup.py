"""The soak benchmark's set-up (see :mod:`soak`): a folder of its own holding ``make demo``'s
source, configuration and Dagster instance, and ``make demo``'s processes, started, watched and
stopped by :mod:`cdc_assets.demo_processes`.

What ``make demo`` writes is taken from where ``scripts/demo.sh`` takes it (the instance's
``dagster.yaml`` from :mod:`cdc_assets.dagster.demo.instance_settings`; its here-documents: the
Python that writes the config from the demo's ``defs.yaml`` with the ``odbc:`` connection to the
TDS server, and the Python that creates the instance's storage), so the soak runs the demo as it
is on the day it runs. On top of it the soak sets, and prints: a history on every table, column
rules on ``customers`` (the hash key in an environment variable), the maintenance schedule, and
its own folder and free ports.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import _common
import yaml

from cdc_assets.dagster.demo.instance_settings import write_instance_settings
from cdc_assets.demo_processes import Demo, Settings, check
from cdc_assets.process_group import ProcessGroup, port_free
from cdc_assets_tests.support.net import free_port

ROOT = Path(__file__).resolve().parent.parent
DEMO_SH = ROOT / "scripts" / "demo.sh"
DEMO_DEFS = ROOT / "cdc_assets" / "defs" / "demo" / "defs.yaml"
BIN = Path(sys.executable).parent
HASH_KEY_ENV = "CDC_SOAK_HASH_KEY"  # the NAME of the variable holding the hash rule's key
PASSWORD_ENV = "CDC_DEMO_SOURCE_PASSWORD"  # as scripts/demo.sh names it
DEMO_PASSWORD = "Demo-Passw0rd"  # scripts/demo.sh's default
_HEREDOC = re.compile(r"<<'EOF'\n(.*?)\nEOF\n", re.S)

# The column rules of ``customers`` at the start, and the rule the schedule changes: a redacted
# string column becomes a hashed one (both string types: a change of stored type is i57h's).
CUSTOMERS = "dbo.customers"
FIRST_RULES = [
    {"tables": CUSTOMERS, "columns": ["email"], "rule": "hash"},
    {"tables": CUSTOMERS, "columns": ["name"], "rule": "redact"},
]
CHANGED_RULE = ("name", "redact", "hash")  # column, rule before, rule after


def demo_script_part(marker: str) -> str:
    """The body of the one here-document of ``scripts/demo.sh`` that holds ``marker``."""
    parts = [body for body in _HEREDOC.findall(DEMO_SH.read_text()) if marker in body]
    if len(parts) != 1:
        raise SystemExit(
            f"soak: scripts/demo.sh has {len(parts)} here-documents holding {marker!r}, not one; "
            "benchmarks/soak_setup.py reads make demo's config from there: update it"
        )
    return parts[0] + "\n"


@dataclass(frozen=True)
class SoakConfig:
    """What the soak runs: the demo's settings (scripts/demo.sh's defaults) and its own."""

    folder: Path
    tps: float
    rows: int  # initial rows per table (DEMO_ROWS)
    max_rows: int  # DEMO_MAX_ROWS
    retention_minutes: int  # the emulated CDC cleanup's (DEMO_RETENTION_MINUTES)
    seed: int
    maintenance_minutes: int  # the maintenance schedule: every this many minutes

    @property
    def source_db(self) -> Path:
        return self.folder / "source.db"

    @property
    def storage(self) -> Path:
        return self.folder / "storage"

    @property
    def home(self) -> Path:
        return self.folder / "dagster_home"

    @property
    def config_path(self) -> Path:
        return self.folder / "cdc_assets.yaml"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"


@dataclass(frozen=True)
class Ports:
    ui: int
    tds: int
    spark: int

    @classmethod
    def free(cls) -> Ports:
        return cls(free_port(), port_below_ephemeral(), free_port())


def port_below_ephemeral() -> int:
    """A free port below the kernel's ephemeral range, for the TDS server: it is stopped for the
    outage and must get its port back, and a port of that range may meanwhile become the local
    port of some connection (the outage's login attempts to it can even connect to themselves)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        if port_free("127.0.0.1", port):
            return port
    raise SystemExit(f"soak: no free port below {low} for the TDS server")


def hold_folder(folder: Path) -> IO[str]:
    """The soak's lock on ``folder`` (held while the returned file is open): one soak per folder."""
    folder.mkdir(parents=True, exist_ok=True)
    lock = (folder / "soak.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise SystemExit(f"soak: another soak runs in {folder}; stop it or use --dir") from None
    return lock


def clear_folder(folder: Path) -> None:
    """What an earlier soak left in ``folder`` (source, storage, instance, logs), not the lock."""
    for entry in folder.iterdir():
        if entry.name == "soak.lock":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def child_environment(cfg: SoakConfig, ports: Ports) -> None:
    """This process's environment as the demo's processes need it (they inherit it)."""
    os.environ["DAGSTER_HOME"] = str(cfg.home)
    os.environ["CDC_ASSETS_CONFIG"] = str(cfg.config_path)
    os.environ["CDC_ASSETS_SPARK_REMOTE"] = f"sc://127.0.0.1:{ports.spark}"
    os.environ.setdefault(PASSWORD_ENV, DEMO_PASSWORD)
    os.environ[HASH_KEY_ENV] = secrets.token_hex(32)  # a fresh key; never printed
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the code of this checkout in every process, whatever checkout the venv points at
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


def create_source(cfg: SoakConfig) -> None:
    """The demo's emulated source, as scripts/demo.sh creates it, scanned by the capture job
    until every capture instance is established."""
    subprocess.run(
        [
            *(str(BIN / "cdc-assets"), "emulator", "create", str(cfg.source_db)),
            *("--seed", str(cfg.seed), "--rows", str(cfg.rows)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _common.capture(cfg.source_db)


def _run_demo_python(marker: str, *argv: str) -> None:
    """Run the Python here-document of scripts/demo.sh holding ``marker`` as demo.sh runs it."""
    subprocess.run(
        [sys.executable, "-", *argv],
        input=demo_script_part(marker),
        text=True,
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )


def write_config(cfg: SoakConfig, ports: Ports) -> dict[str, Any]:
    """make demo's cdc_assets.yaml (scripts/demo.sh writes it from the demo's defs.yaml: the
    source over TDS), then the soak's settings on top; returns the config written."""
    _run_demo_python(
        "msodbcsql18_path", str(DEMO_DEFS), str(cfg.config_path), str(ports.tds), str(ROOT)
    )
    data = yaml.safe_load(cfg.config_path.read_text())
    source = data["sources"][0]
    source["history"] = {"include": ["*"]}
    source["columns"] = {"hash_key_env": HASH_KEY_ENV, "rules": [dict(r) for r in FIRST_RULES]}
    maintenance = dict(source.get("maintenance") or {})
    maintenance["cron"] = f"*/{cfg.maintenance_minutes} * * * *"
    source["maintenance"] = maintenance
    data["storage"]["base_path"] = str(cfg.storage)
    data["spark"]["remote"] = f"sc://127.0.0.1:{ports.spark}"
    save_config(cfg, data)
    return data


def save_config(cfg: SoakConfig, data: dict[str, Any]) -> None:
    header = "# Written by benchmarks/soak.py: make demo's config (scripts/demo.sh) + the soak's.\n"
    cfg.config_path.write_text(header + yaml.safe_dump(data, sort_keys=False))


def change_rule(cfg: SoakConfig) -> str:
    """Edit the config: :data:`CHANGED_RULE` (as a person edits the file); what changed."""
    data = yaml.safe_load(cfg.config_path.read_text())
    column, before, after = CHANGED_RULE
    for rule in data["sources"][0]["columns"]["rules"]:
        if rule["columns"] == [column] and rule["rule"] == before:
            rule["rule"] = after
    save_config(cfg, data)
    return f"{CUSTOMERS}.{column}: {before} → {after}"


def write_instance(cfg: SoakConfig) -> None:
    """make demo's dagster.yaml, and the instance's storage created before dagster dev's
    processes would race to (scripts/demo.sh's own Python for it)."""
    write_instance_settings(cfg.home)
    _run_demo_python("report_run_failed")


def emulator_config(cfg: SoakConfig) -> Path:
    """The config with the source reached as a file (the emulator), for the soak's own reads:
    they must go on while the TDS server is stopped."""
    data = yaml.safe_load(cfg.config_path.read_text())
    data["sources"][0]["connection"] = {"emulator": {"path": str(cfg.source_db)}}
    path = cfg.folder / "soak-reader.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class SoakProcesses(Demo):
    """make demo's processes (:class:`cdc_assets.demo_processes.Demo`) run for the soak: the
    soak's loop instead of the demo's watch, the run-line display's lines to a file, and a
    process the soak stops on purpose (the TDS server for the outage, the workload at the end)
    not taken for one that ended on its own. Whatever ends it, ``run`` stops everything."""

    def __init__(
        self, settings: Settings, soak: Callable[[SoakProcesses], None], lines: Path
    ) -> None:
        super().__init__(settings)
        self.soak = soak
        self.lines = lines

    def _forward(self, group: ProcessGroup) -> None:
        assert group.output is not None
        with self.lines.open("ab") as out:
            for raw in group.output:
                out.write(raw)
                out.flush()

    def watch(self) -> None:
        self.soak(self)

    def say(self, line: str) -> None:
        self.terminal.say(line)

    def pause(self, seconds: float) -> bool:
        """Sleep up to ``seconds`` watching the processes; False when the soak must stop."""
        return self._pause(seconds)

    def wait_until(self, ready: Callable[[], bool], seconds: float) -> bool:
        return self._wait_until(ready, seconds)

    def stopping(self) -> bool:
        return self.reason is not None

    def end(self, reason: str) -> None:
        self.reason = self.reason or reason

    def stop_process(self, name: str) -> None:
        """Stop one of the processes on purpose (watched no more until restarted)."""
        group = self.groups.pop(name)
        group.stop(self.children[name].patience, signal.SIGINT)

    def restart_process(self, name: str) -> ProcessGroup:
        return self._start(self.children[name])

    def tail(self, name: str, lines: int = 50) -> str:
        group = self.groups.get(name)
        return group.tail(lines) if group is not None else ""


def demo_settings(cfg: SoakConfig, ports: Ports) -> Settings:
    return Settings(
        root=ROOT,
        demo_dir=cfg.folder,
        source=cfg.source_db,
        host="127.0.0.1",
        port=ports.ui,
        tds_port=ports.tds,
        tps=f"{cfg.tps:g}",
        seed=cfg.seed,
        max_rows=str(cfg.max_rows),
        retention_minutes=str(cfg.retention_minutes),
        spark_remote=f"sc://127.0.0.1:{ports.spark}",
        parent=os.getppid(),
    )


def prepare(cfg: SoakConfig, ports: Ports) -> tuple[Settings, dict[str, Any]]:
    """The folder made ready as scripts/demo.sh makes .demo: a new source, the config, the
    instance; the processes' environment. SystemExit when the ports are taken."""
    settings = demo_settings(cfg, ports)
    problem = check(settings)  # processes an earlier soak here left (its demo.pids), the ports
    if problem:
        raise SystemExit(problem.replace("demo:", "soak:", 1))
    clear_folder(cfg.folder)
    cfg.logs.mkdir(parents=True)
    child_environment(cfg, ports)
    create_source(cfg)
    data = write_config(cfg, ports)
    write_instance(cfg)
    return settings, data
