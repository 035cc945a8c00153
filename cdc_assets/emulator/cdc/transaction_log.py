"""The emulated transaction log of a tracked table: SQLite triggers writing row images.

SQL Server's capture job reads the transaction log; the emulator's equivalent is one log table
per tracked source table, ``_emu_log_<object_id>``, filled by ``AFTER`` triggers inside the
writer's transaction (so rolled-back work never appears):

- INSERT: one row, ``op`` 2, the new image;
- DELETE: one row, ``op`` 1, the old image;
- UPDATE that keeps the primary key: ``op`` 3 (old image) and ``op`` 4 (new image) sharing one
  ``seq``, with ``changed`` = one '0'/'1' character per source column id (changed bytes, compared
  with BINARY collation);
- UPDATE that changes the primary key: logged like SQL Server's split update, ``op`` 1 (old) and
  ``op`` 2 (new). After the statement the emulator renumbers the statement's rows so that all its
  deletes come before its inserts (:func:`order_split_update`), which makes replay in
  (``__$start_lsn``, ``__$command_id``, ``__$seqval``, ``__$operation``) order correct even when
  keys are shifted (``SET id = id + 1``).

Each row records ``cmd`` (the statement number inside the transaction, ``_emu_cmd()``) and
``seq`` (an LSN-valued sequence number from ``_emu_seq()``, below the transaction's commit LSN).
``lsn`` stays NULL until COMMIT stamps the transaction's commit LSN on its rows.

Log columns are named ``c<column_id>``: ids are never reused, so a dropped column keeps its log
column (NULL in later rows, as SQL Server supplies NULL for a dropped captured column) and a new
column gets a new one.
"""

from __future__ import annotations

import sqlite3

from ..catalog.catalog import EmulatedTable
from ..catalog.storage import quote


def log_table(object_id: int) -> str:
    return f"_emu_log_{object_id}"


def _trigger_names(object_id: int) -> tuple[str, ...]:
    return tuple(f"_emu_{kind}_{object_id}" for kind in ("ins", "del", "upd", "updk"))


def create_log(db: sqlite3.Connection, table: EmulatedTable) -> None:
    """Create the log table of a newly tracked table and its triggers."""
    assert table.object_id is not None
    log = quote(log_table(table.object_id))
    cols = "".join(f", c{c.column_id} {c.type.decltype}" for c in table.columns)
    db.execute(
        f"CREATE TABLE IF NOT EXISTS {log} (pos INTEGER PRIMARY KEY, lsn INTEGER, cmd INTEGER, "
        f"seq INTEGER, op INTEGER, split INTEGER, changed TEXT{cols})"
    )
    db.execute(
        f"CREATE INDEX IF NOT EXISTS {quote(log_table(table.object_id) + '_lsn')} ON {log} (lsn)"
    )
    install_triggers(db, table)


def add_log_column(
    db: sqlite3.Connection, table: EmulatedTable, column_id: int, decltype: str
) -> None:
    assert table.object_id is not None
    log = quote(log_table(table.object_id))
    db.execute(f"ALTER TABLE {log} ADD COLUMN c{column_id} {decltype}")


def drop_triggers(db: sqlite3.Connection, object_id: int) -> None:
    for name in _trigger_names(object_id):
        db.execute(f"DROP TRIGGER IF EXISTS {quote(name)}")


def drop_log(db: sqlite3.Connection, object_id: int) -> None:
    drop_triggers(db, object_id)
    db.execute(f"DROP TABLE IF EXISTS {quote(log_table(object_id))}")


def install_triggers(db: sqlite3.Connection, table: EmulatedTable) -> None:
    """(Re)create the triggers for the table's current columns."""
    assert table.object_id is not None
    oid = table.object_id
    drop_triggers(db, oid)
    src = quote(table.physical)
    log = quote(log_table(oid))
    names = [quote(c.name) for c in table.columns]
    targets = ", ".join(f"c{c.column_id}" for c in table.columns)
    new = ", ".join(f"NEW.{n}" for n in names)
    old = ", ".join(f"OLD.{n}" for n in names)
    width = max((c.column_id for c in table.columns), default=0)
    by_id = {c.column_id: quote(c.name) for c in table.columns}
    pieces = []
    for cid in range(1, width + 1):
        name = by_id.get(cid)
        if name is None:
            pieces.append("'0'")
        else:
            pieces.append(
                f"(CASE WHEN NEW.{name} IS NOT OLD.{name} COLLATE BINARY THEN '1' ELSE '0' END)"
            )
    changed = " || ".join(pieces) if pieces else "''"
    head = f"INSERT INTO {log} (cmd, seq, op, split, changed, {targets})"
    db.execute(
        f"CREATE TRIGGER {quote(f'_emu_ins_{oid}')} AFTER INSERT ON {src} BEGIN "
        f"{head} VALUES (_emu_cmd(), _emu_seq(), 2, 0, NULL, {new}); END"
    )
    db.execute(
        f"CREATE TRIGGER {quote(f'_emu_del_{oid}')} AFTER DELETE ON {src} BEGIN "
        f"{head} VALUES (_emu_cmd(), _emu_seq(), 1, 0, NULL, {old}); END"
    )
    keys = [quote(k) for k in table.key]
    same_key = " AND ".join(f"NEW.{k} IS OLD.{k} COLLATE BINARY" for k in keys) or "1"
    db.execute(
        f"CREATE TRIGGER {quote(f'_emu_upd_{oid}')} AFTER UPDATE ON {src} WHEN {same_key} BEGIN "
        f"{head} VALUES (_emu_cmd(), _emu_seq(), 3, 0, {changed}, {old}); "
        f"{head} SELECT cmd, seq, 4, 0, changed, {new} FROM {log} WHERE pos = last_insert_rowid(); "
        "END"
    )
    if keys:
        db.execute(
            f"CREATE TRIGGER {quote(f'_emu_updk_{oid}')} AFTER UPDATE ON {src} "
            f"WHEN NOT ({same_key}) BEGIN "
            f"{head} VALUES (_emu_cmd(), _emu_seq(), 1, 1, NULL, {old}); "
            f"{head} VALUES (_emu_cmd(), _emu_seq(), 2, 2, NULL, {new}); "
            "END"
        )


def order_split_update(db: sqlite3.Connection, object_id: int, command: int) -> None:
    """Give a key-changing UPDATE's rows SQL Server's order: all deletes, then all inserts.

    The statement's sequence numbers are reassigned among its events (an update pair 3/4 is one
    event; each row of a split update is one event) ordered by (is split insert, log position).
    """
    log = quote(log_table(object_id))
    rows = db.execute(
        f"SELECT pos, seq, split FROM {log} WHERE lsn IS NULL AND cmd = ? ORDER BY pos",
        (command,),
    ).fetchall()
    if not any(split for _, _, split in rows):
        return
    events: dict[int, list[int]] = {}
    first_pos: dict[int, int] = {}
    rank: dict[int, int] = {}
    for pos, seq, split in rows:
        events.setdefault(seq, []).append(pos)
        first_pos.setdefault(seq, pos)
        rank[seq] = 1 if split == 2 else 0
    seqs = sorted(events)
    ordered = sorted(events, key=lambda s: (rank[s], first_pos[s]))
    updates = []
    for new_seq, old_seq in zip(seqs, ordered, strict=True):
        if new_seq != old_seq:
            updates.extend((new_seq, pos) for pos in events[old_seq])
    db.executemany(f"UPDATE {log} SET seq = ? WHERE pos = ?", updates)
