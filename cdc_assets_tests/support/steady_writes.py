"""A workload that keeps writing to an emulated source while a test looks at the sync."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from cdc_assets import emulator
from cdc_assets.workload import DEMO_TABLES, TableDef, Workload


@contextmanager
def steady_writes(
    db: Path, every: float, *, seed: int, tables: Sequence[TableDef] = DEMO_TABLES
) -> Iterator[None]:
    """A workload transaction on ``db`` every ``every`` s, on a connection of its own (in a
    thread), until the block ends; capture is the caller's (a capture agent, or scans)."""
    stop = threading.Event()

    def write() -> None:
        conn = emulator.connect(str(db), autocommit=True)
        try:
            workload = Workload(conn, seed=seed, tables=tables)  # on the existing tables
            while not stop.wait(every):
                workload.step()
        finally:
            conn.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join(60)
