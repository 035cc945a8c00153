"""The tables of a step worked on side by side: driver threads, each with its own source
connection, submitting their Spark jobs and Delta commits at the same time.

Most of a small table's read, write or MERGE is latency (Spark planning and scheduling, the Delta
log, the commit), not computation, so a few tables at once keep the executors busy where one at
a time leaves them waiting. Each table's work returns its events (Dagster outputs, check results,
log lines); the step yields them from its own thread, in table order, so Dagster sees one
table's events together. A table's failure is its own: returned, never raised in the others.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from cdc_assets.sqlserver.dbapi import DbapiConnection

from .io_manager import table_error
from .source import CapturedTable, Source

T = TypeVar("T")
E = TypeVar("E")


@dataclass(frozen=True)
class LogLine:
    """A line for the step's log, written by the step's own thread."""

    level: Literal["info", "warning", "error"]
    text: str


@dataclass(frozen=True)
class Done(Generic[T]):
    """One table's work: its result, or the exception it ended with."""

    table: CapturedTable
    result: T | None
    error: BaseException | None


class ThreadConnections:
    """One source connection per worker thread (DB-API connections are not thread-safe),
    opened when a thread first asks and closed together at the end."""

    def __init__(self, source: Source) -> None:
        self._source = source
        self._local = threading.local()
        self._opened: list[DbapiConnection] = []
        self._lock = threading.Lock()

    def get(self) -> DbapiConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._source.connect()
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for conn in opened:
            with contextlib.suppress(Exception):  # a connection the source already dropped
                conn.close()


def collect(events: Iterator[E]) -> tuple[list[E], BaseException | None]:
    """The events of one table's work so far, and the error it stopped with (a table that
    fails after its output keeps that output: it was committed)."""
    found: list[E] = []
    try:
        for event in events:
            found.append(event)
    except Exception as exc:
        return found, exc
    return found, None


def run_tables(
    tables: Sequence[CapturedTable],
    work: Callable[[CapturedTable], T],
    workers: int,
    initializer: Callable[[], None] | None = None,
) -> Iterator[Done[T]]:
    """``work(table)`` for every table, ``workers`` at a time; each outcome in table order as
    soon as it and those before it are done. Stopping the iteration early cancels the work not
    started yet (a source-level error: the step fails at once). ``initializer`` runs first in
    each worker thread (the Spark session made the thread's own)."""
    if workers <= 1 or len(tables) <= 1:
        for table in tables:
            try:
                yield Done(table, work(table), None)
            except Exception as exc:
                yield Done(table, None, exc)
        return
    pool = ThreadPoolExecutor(
        max_workers=min(workers, len(tables)), thread_name_prefix="table", initializer=initializer
    )
    futures: list[Future[T]] = [pool.submit(work, table) for table in tables]
    try:
        for table, future in zip(tables, futures, strict=True):
            error = future.exception()
            if error is not None and not isinstance(error, Exception):
                raise error  # KeyboardInterrupt, SystemExit: not a table's failure
            yield Done(table, None if error is not None else future.result(), error)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def pooled_events(
    log: Any,
    tables: Sequence[CapturedTable],
    events: Callable[[CapturedTable], Iterator[E | LogLine]],
    workers: int,
    initializer: Callable[[], None] | None = None,
) -> Generator[E, None, dict[CapturedTable, str]]:
    """Each table's ``events`` in the pool (:func:`run_tables`): its log lines written to
    ``log`` (the step's), its other events yielded in table order; returns the tables that
    failed, each with its error in one line (logged), while the others went on."""
    failed: dict[CapturedTable, str] = {}
    for done in run_tables(tables, lambda t: collect(events(t)), workers, initializer):
        found, error = done.result or ([], done.error)
        for event in found:
            if isinstance(event, LogLine):
                getattr(log, event.level)(event.text)
            else:
                yield event
        if error is not None:
            message = table_error(done.table.qualified_name, error)
            log.error(message)
            failed[done.table] = message
    return failed
