"""What the soak benchmark (see :mod:`soak`) records while it runs, each sample with its wall
time (``time.time()``), in two threads:

- every second, where each mirror is (``sync_state.mirror_at`` through
  :func:`freshness_run.mirror_lsns`, as the freshness benchmark waits for its mirrors);
- every ``--sample-seconds``: the transactions committed since the last sample (commit LSN,
  commit time, tables touched: :func:`freshness_analysis.read_commits`, read before the
  emulated CDC cleanup removes them); per Delta table (change logs, mirrors, histories, the sync
  state) its live data files and their bytes from its Delta log (:mod:`cdc_assets.spark.
  delta_log`), the bytes of its folder and the data files its folder holds that its current
  version does not (with when each was first seen so: what VACUUM should delete an hour or so
  later); the resident memory of each long-lived process; and the runs that ended (status,
  seconds, and for a failed one Dagster's message, as ``make demo``'s run lines say it).

Nothing here judges: :mod:`soak_report` does, from the samples (also written to JSON).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from freshness_analysis import read_commits
from freshness_run import mirror_lsns

from cdc_assets.dagster.sync.source import Source
from cdc_assets.lsn import Lsn
from cdc_assets.process_group import ProcessInfo, descendants, live, processes
from cdc_assets.spark import deletion_vectors, delta_log

KINDS = ("change log", "mirror", "history", "sync state")
PAGE = os.sysconf("SC_PAGE_SIZE")
# A process's role, from its command line: the first pattern found names it.
ROLES = (
    ("run worker", "cdc_assets.dagster.run_worker"),
    ("daemon", "dagster-daemon"),
    ("daemon", "dagster._daemon"),
    ("webserver", "dagster-webserver"),
    ("webserver", "dagster_webserver"),
    ("code server", "code-server"),
    ("code server", "api grpc"),
    ("code server", "dagster._grpc"),
    ("Spark Connect (JVM)", "SparkConnectServer"),
    ("Spark Python workers", "pyspark"),
    ("dagster dev", "dagster dev"),
    ("TDS server", "emulator serve"),
    ("workload", "emulator workload"),
    ("run-line display", "cdc_assets.dagster.demo.run_lines"),
    ("compute-log watchers", "watch_orphans.py"),  # a run's log capture: tail -F and its watcher
    ("compute-log watchers", "tail -F"),
    ("step processes", "multiprocessing.spawn"),  # a job with Dagster's multiprocess executor
    ("step processes", "multiprocessing.forkserver"),
    ("step processes", "multiprocessing.resource_tracker"),  # started by a run's multiprocessing
)


@dataclass(frozen=True)
class StoredTable:
    """One Delta table of the sync: its kind, the table it belongs to, its folder."""

    kind: str
    table: str
    path: Path


def stored_tables(source: Source) -> list[StoredTable]:
    found = []
    for t in source.tables:
        name = t.name
        found.append(
            StoredTable("change log", name, Path(source.store.location(t.change_log_key.path)))
        )
        found.append(StoredTable("mirror", name, Path(source.store.location(t.mirror_key.path))))
        if t in source.history_tables:
            found.append(
                StoredTable("history", name, Path(source.store.location(t.history_key.path)))
            )
    found.append(
        StoredTable("sync state", source.name, Path(source.storage) / "sync_state" / source.name)
    )
    return found


def _data_files(folder: Path) -> dict[str, tuple[int, float]]:
    """The data and deletion-vector files under ``folder`` (not its log), by path relative to
    it: (bytes, modification time)."""
    found: dict[str, tuple[int, float]] = {}
    for root, dirs, files in os.walk(folder):
        if "_delta_log" in dirs:
            dirs.remove("_delta_log")
        for name in files:
            if name.startswith(".") or not name.endswith((".parquet", ".bin")):
                continue
            full = os.path.join(root, name)
            with contextlib.suppress(OSError):
                info = os.stat(full)
                found[os.path.relpath(full, folder)] = (info.st_size, info.st_mtime)
    return found


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _live_files(path: Path) -> tuple[set[str], int] | None:
    """The data files (and their deletion vectors) of the table's current version and their
    bytes; None when its log cannot be read now."""
    try:
        log = delta_log.read(path)
    except (OSError, ValueError):  # a commit or checkpoint being replaced under the read
        return None
    if log is None:
        return None
    names: set[str] = set()
    size = 0
    for (file, _dv), add in log.files.items():
        names.add(unquote(file))  # the log's paths are URL-encoded
        size += int(add.get("size") or 0)
        vector = add.get("deletionVector") or {}
        if vector.get("storageType") == "u":  # a deletion-vector file beside the data
            where = deletion_vectors.vector_file(Path(), vector["pathOrInlineDv"])
            names.add(str(where))
    return names, size


@dataclass
class Recorder:
    """The samples (module doc); ``errors`` counts samples that failed, by what."""

    source: Source
    db: Path
    home: Path
    groups: Callable[[], dict[str, int]]  # the demo's process group leaders by name
    sample_seconds: float
    positions: list[tuple[float, list[int]]] = field(default_factory=list)
    position_seconds: list[float] = field(default_factory=list)  # what each position read took
    commits: dict[int, tuple[float, list[str]]] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    rss: list[dict[str, Any]] = field(default_factory=list)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    tables: list[StoredTable] = field(default_factory=list)
    removed_seen: dict[str, float] = field(default_factory=dict)  # file → first seen not live
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _runs_since: dt.datetime | None = None

    def start(self) -> Recorder:
        self.tables = stored_tables(self.source)
        for target, name in (
            (self._positions_loop, "soak-positions"),
            (self._slow_loop, "soak-samples"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def _count(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    # -- every second ------------------------------------------------------------------------
    def _positions_loop(self) -> None:
        while not self._stop.is_set():
            self.sample_positions()
            self._stop.wait(1.0)

    def sample_positions(self) -> None:
        began = time.time()
        try:
            found = mirror_lsns(self.source)
        except Exception:
            self._count("mirror positions")
            return
        now = time.time()  # a mirror seen here may have moved since ``began``: the later time
        self.positions.append((now, [-1 if x is None else x for x in found]))
        self.position_seconds.append(now - began)

    # -- every sample_seconds ----------------------------------------------------------------
    def _slow_loop(self) -> None:
        from dagster import DagsterInstance

        with DagsterInstance.from_config(str(self.home)) as instance:
            while not self._stop.is_set():
                self.sample_slow(instance)
                self._stop.wait(self.sample_seconds)

    def sample_slow(self, instance: Any) -> None:
        for what, step in (
            ("commits", self.sample_commits),
            ("files", self.sample_files),
            ("memory", self.sample_memory),
            ("runs", lambda: self.sample_runs(instance)),
        ):
            try:
                step()
            except Exception:
                self._count(what)

    def sample_commits(self) -> None:
        after = max(self.commits, default=0)
        for commit in read_commits(self.db, self.source, after):
            self.commits[commit.lsn] = (commit.committed, sorted(commit.tables))

    def sample_files(self) -> None:
        """Per Delta table: bytes, live files, files not live and for how long (those ages kept
        in the newest sample only: the JSON would grow with every sample)."""
        now = time.time()
        for row in self.files[-1]["tables"] if self.files else []:
            row.pop("not_live_ages", None)
        sample: dict[str, Any] = {"at": now, "tables": []}
        for table in self.tables:
            if not table.path.exists():
                continue
            live = _live_files(table.path)
            on_disk = _data_files(table.path)
            row: dict[str, Any] = {
                "kind": table.kind,
                "table": table.table,
                "bytes": _folder_bytes(table.path),
            }
            if live is not None:
                names, live_bytes = live
                row["live_files"] = sum(1 for n in names if n.endswith(".parquet"))
                row["live_bytes"] = live_bytes
                unreferenced = [n for n in on_disk if n not in names]
                for name in unreferenced:
                    self.removed_seen.setdefault(f"{table.path}/{name}", now)
                ages = [now - self.removed_seen[f"{table.path}/{n}"] for n in unreferenced]
                row["not_live_files"] = len(unreferenced)
                row["not_live_oldest_seconds"] = max(ages, default=0.0)
                row["not_live_ages"] = sorted(ages)
            else:
                self._count(f"delta log of {table.kind} {table.table}")
            sample["tables"].append(row)
        self.files.append(sample)

    def sample_memory(self) -> None:
        found = processes()
        leaders = self.groups()
        sample: dict[str, Any] = {"at": time.time(), "roles": {}}
        for name, pid in leaders.items():
            for p in live(descendants(pid, found)):
                role = role_of(p) or f"other ({name})"
                rss = _rss(p.pid)
                if rss is None:
                    continue
                sample["roles"].setdefault(role, []).append(rss)
                if role.startswith("other"):
                    sample.setdefault("other", []).append(f"{rss >> 20} MB {p.command[:120]}")
        self.rss.append(sample)

    def sample_runs(self, instance: Any) -> None:
        from dagster import DagsterRunStatus, RunsFilter

        from cdc_assets.dagster.demo.run_lines import describe_run
        from cdc_assets.dagster.sync.names import PARTITION_TAG

        finished = [DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
        since = self._runs_since
        records = instance.get_run_records(
            filters=RunsFilter(statuses=finished, updated_after=since), limit=2000
        )
        for record in records:
            run = record.dagster_run
            if run.run_id in self.runs:
                continue
            item: dict[str, Any] = {
                "job": run.job_name,
                "status": run.status.value,
                "partition": run.tags.get(PARTITION_TAG) or run.tags.get("dagster/partition"),
                "created": record.create_timestamp.timestamp(),
                "started": record.start_time,
                "ended": record.end_time,
            }
            if run.status != DagsterRunStatus.SUCCESS:
                line, checks = describe_run(instance, run.run_id)
                item["failure"] = line.failure or _last_engine_event(instance, run.run_id)
                item["failed_checks"] = checks
            self.runs[run.run_id] = item
            updated = record.update_timestamp
            if since is None or updated > since:
                since = updated
        # a run updated in the same second as the newest seen may come later: look again
        self._runs_since = since - dt.timedelta(seconds=5) if since is not None else None


def runs_in_flight(instance: Any) -> list[dict[str, Any]]:
    """The runs not finished now: job, partition, status, when created."""
    from dagster import DagsterRunStatus, RunsFilter

    waiting = [
        DagsterRunStatus.QUEUED,
        DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.STARTING,
        DagsterRunStatus.STARTED,
        DagsterRunStatus.CANCELING,
    ]
    return [
        {
            "run_id": r.dagster_run.run_id,
            "job": r.dagster_run.job_name,
            "partition": r.dagster_run.tags.get("dagster/partition"),
            "status": r.dagster_run.status.value,
            "created": r.create_timestamp.timestamp(),
        }
        for r in instance.get_run_records(filters=RunsFilter(statuses=waiting), limit=100)
    ]


def _last_engine_event(instance: Any, run_id: str) -> str:
    """The last engine event of a run that failed without an error (its worker killed: the
    launcher says so in one)."""
    from dagster import DagsterEventType

    found = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ENGINE_EVENT, limit=1, ascending=False
    ).records
    if not found:
        return ""
    entry = found[0].event_log_entry  # the launcher's text is the event's message, not the user's
    return (entry.dagster_event.message if entry.dagster_event else None) or entry.user_message


def role_of(p: ProcessInfo) -> str | None:
    for role, pattern in ROLES:
        if pattern in p.command:
            return role
    return None


def _rss(pid: int) -> int | None:
    """Resident bytes of ``pid`` (``/proc/<pid>/statm``); None when it ended."""
    try:
        fields = Path(f"/proc/{pid}/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * PAGE


def last_commit_lsn(db: Path) -> int:
    """The newest captured transaction's commit LSN (0 before the first)."""
    from cdc_assets import emulator
    from cdc_assets.sqlserver import last_transaction_lsn

    conn = emulator.connect(db, autocommit=True)
    try:
        last = last_transaction_lsn(conn)
    finally:
        conn.close()
    return int(last) if last is not None else 0


def lsn_hex(value: int) -> str:
    return Lsn.from_int(value).hex if value >= 0 else "none"
