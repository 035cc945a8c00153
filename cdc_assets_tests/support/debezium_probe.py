"""Debezium's SQL Server connector against the TDS server: the small Java program the Debezium
test and ``benchmarks/debezium_peer.py`` run, and its events in comparable form.

``debezium/DebeziumProbe.java`` runs Debezium 3.3's embedded engine (jars fetched at install time
by scripts/install_jars.sh into ``<prefix>/share/cdc_assets/jars-debezium``, never at test time)
with a file offset store and schema history (no Kafka) and writes each event as a JSON line.
:class:`DebeziumRun` starts it, reads its events and stops it; :func:`canonical` turns a value as
Debezium's JSON converter writes it, and :func:`stored_canonical` a value of the project's change
log as Spark reads it, into one comparable form (the change log keeps microseconds and a
``datetimeoffset`` as its UTC instant, so both are compared at that precision).
"""

from __future__ import annotations

import datetime as dt
import json
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

JAR_DIR = Path(sys.prefix) / "share" / "cdc_assets" / "jars-debezium"
MARKER_JAR = "debezium-connector-sqlserver-3.3.1.Final.jar"
SOURCE = Path(__file__).with_name("debezium") / "DebeziumProbe.java"


def jars_present() -> bool:
    return (JAR_DIR / MARKER_JAR).is_file()


def compile_probe(target: Path) -> Path:
    """Compile DebeziumProbe.java into ``target``; the classes folder."""
    if not jars_present():
        raise AssertionError(
            f"{JAR_DIR / MARKER_JAR} is missing: run bash scripts/install_jars.sh (or make setup)"
        )
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["javac", "-cp", f"{JAR_DIR}/*", "-d", str(target), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return target


def lsn_bytes(text: str | None) -> bytes | None:
    """``0000002a:00000100:04c1`` (Debezium's form of an LSN) as the 10 bytes it stands for."""
    return None if text is None else bytes.fromhex(text.replace(":", ""))


@dataclass(frozen=True)
class Event:
    """One change event: its table, operation (r, c, u, d), images and source position."""

    table: str  # schema.table
    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    commit_lsn: bytes | None
    change_lsn: bytes | None
    snapshot: str
    received_ms: int

    @classmethod
    def parse(cls, line: dict[str, Any]) -> Event | None:
        value = line.get("value") or {}
        source = value.get("source") or {}
        if "op" not in value or "table" not in source:
            return None  # a schema change event
        return cls(
            table=f"{source['schema']}.{source['table']}",
            op=value["op"],
            before=value.get("before"),
            after=value.get("after"),
            commit_lsn=lsn_bytes(source.get("commit_lsn")),
            change_lsn=lsn_bytes(source.get("change_lsn")),
            snapshot=str(source.get("snapshot") or "false"),
            received_ms=int(line["received_ms"]),
        )


class DebeziumRun:
    """DebeziumProbe running against ``127.0.0.1:port`` (a context manager that stops it)."""

    def __init__(
        self,
        classes: Path,
        work: Path,
        *,
        port: int,
        database: str,
        user: str,
        password: str,
        tables: list[str],
        extra: dict[str, str] | None = None,
    ) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.output = work / "events.jsonl"
        self.output.touch()
        self._stderr: IO[bytes] = (work / "debezium.log").open("wb")
        self.log = work / "debezium.log"
        options = ";".join(f"{k}={v}" for k, v in (extra or {}).items())
        self.process = subprocess.Popen(
            [
                "java",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                f"-Dprobe.extra={options}",
                "-cp",
                f"{JAR_DIR}/*:{classes}",
                "DebeziumProbe",
                "127.0.0.1",
                str(port),
                database,
                user,
                password,
                ",".join(tables),
                str(work),
                str(self.output),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self._offset = 0
        self._lines: list[dict[str, Any]] = []
        self.events: list[Event] = []

    def poll(self) -> list[Event]:
        """The events written since the last poll (the engine's end fails the caller)."""
        with self.output.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        fresh: list[Event] = []
        for raw in data[:end].splitlines():
            line = json.loads(raw)
            if "completed" in line:
                raise AssertionError(f"Debezium's engine stopped: {line}; log: {self.tail()}")
            event = Event.parse(line)
            if event is not None:
                fresh.append(event)
        self.events.extend(fresh)
        return fresh

    def wait_for(self, done: Callable[[list[Event]], bool], *, timeout: float, what: str) -> None:
        """Poll until ``done(all events so far)``; fail with ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if done(self.events):
                return
            if self.process.poll() is not None:
                raise AssertionError(f"Debezium exited ({self.process.returncode}): {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Debezium did not deliver {what} in {timeout:.0f} s "
                    f"({len(self.events)} events); log: {self.tail()}"
                )
            time.sleep(0.05)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(b"stop\n")
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait(timeout=30)
        self._stderr.close()

    def __enter__(self) -> DebeziumRun:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _iso(text: str) -> str:
    """Debezium's ISO text without its ``Z`` and with at most 6 fractional digits."""
    text = text.removesuffix("Z")
    if "." not in text:
        return text
    whole, fraction = text.split(".", 1)
    return f"{whole}.{fraction[:6].ljust(6, '0')}"


def _float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def canonical(value: Any, type_name: str) -> Any:
    """A value of a Debezium event (JSON converter, decimals as strings, binary as hex, dates
    and times as ISO text) in the comparable form (see the module docstring)."""
    if value is None:
        return None
    if type_name in ("decimal", "numeric", "money", "smallmoney"):
        return Decimal(value)
    if type_name == "real":
        return _float32(float(value))
    if type_name == "float":
        return float(value)
    if type_name in ("binary", "varbinary", "image"):
        return bytes.fromhex(value)
    if type_name == "uniqueidentifier":
        return str(value).upper()
    if type_name == "date":
        return dt.date.fromisoformat(_iso(value))
    if type_name == "time":
        return dt.time.fromisoformat(_iso(value))
    if type_name in ("datetime", "smalldatetime", "datetime2"):
        return dt.datetime.fromisoformat(_iso(value))
    if type_name == "datetimeoffset":
        return _instant_micros(str(value))
    return value


def _instant_micros(text: str) -> int:
    """``2011-10-17T19:52:50.99+09:00`` (up to 9 fractional digits, or ``Z``) as UTC epoch µs."""
    text = text.replace("Z", "+00:00")
    sign_at = max(text.rfind("+"), text.rfind("-"))
    moment = dt.datetime.fromisoformat(_iso(text[:sign_at]) + text[sign_at:])
    return (moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


def stored_canonical(value: Any, type_name: str) -> Any:
    """A value of the project's change log as Spark collects it (``datetimeoffset`` selected as
    ``unix_micros``, ``time`` as stored text or a time), or of a change table as the DB-API
    returns it, in the comparable form."""
    if value is None:
        return None
    if type_name == "datetimeoffset" and isinstance(value, dt.datetime):
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if type_name in ("binary", "varbinary", "image"):
        return bytes(value)
    if type_name == "real":
        return _float32(float(value))
    if type_name == "time" and isinstance(value, str):
        return dt.time.fromisoformat(value)
    if type_name == "uniqueidentifier":
        return str(value).upper()
    return value


Types = dict[str, str]  # column name -> SQL Server type name, in the table's column order
OPS = {1: "d", 2: "c"}


def change_events(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Change rows ``(start LSN, seqval, command id, operation, image)`` (images in the
    comparable form) as Debezium's events ``(commit LSN, change LSN, command id, op, before,
    after)``, in change-log order; an update's two rows are one event."""
    ordered = sorted(rows, key=lambda r: (bytes(r[0]), r[2] or 0, bytes(r[1]), r[3]))
    events: list[tuple[Any, ...]] = []
    for start, seqval, command, operation, image in ordered:
        position = (bytes(start), bytes(seqval), command)
        if operation == 3:
            events.append((*position, "u", image, None))
        elif operation == 4:
            if not events or events[-1][3] != "u" or events[-1][5] is not None:
                raise AssertionError(f"an update's after image without its before: {position}")
            events[-1] = (*events[-1][:5], image)
        else:
            before, after = (image, None) if operation == 1 else (None, image)
            events.append((*position, OPS[operation], before, after))
    return events


def debezium_tuple(event: Event, types: Types) -> tuple[Any, ...]:
    """A streamed event as ``(commit LSN, change LSN, op, before, after)``, comparable with
    :func:`change_events`' without the command id."""

    def image(values: dict[str, Any] | None) -> Any:
        if values is None:
            return None
        return tuple(canonical(values[name], type_name) for name, type_name in types.items())

    return (event.commit_lsn, event.change_lsn, event.op, image(event.before), image(event.after))


def first_difference(table: str, names: list[str], theirs: list[Any], ours: list[Any]) -> str:
    """Where Debezium's events of ``table`` first differ from the change log's."""
    for n, (a, b) in enumerate(zip(theirs, ours, strict=False)):
        if a != b:
            columns = [
                (names[i], x, y)
                for image in (3, 4)
                if a[image] and b[image]
                for i, (x, y) in enumerate(zip(a[image], b[image], strict=True))
                if x != y
            ]
            return f"{table}: event {n}: Debezium {a[:3]} vs ours {b[:3]}; columns {columns}"
    return f"{table}: {len(theirs)} Debezium events, {len(ours)} in the change log"
