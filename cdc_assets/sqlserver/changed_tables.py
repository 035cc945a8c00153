"""Which capture instances have change rows in a range ``(lo, hi]``, and how many: one statement
for up to :data:`CHUNK` instances (a ``UNION ALL`` of one ``COUNT_BIG`` per change table, each
an index seek on ``__$start_lsn``, the change table's clustered key), instead of one read per
table. Tables without changes then record the range without reading anything (issue 17).

The instances are numbered in the statement (an integer literal per branch), so no name is
ever written into the SQL text as a value; the change tables are quoted identifiers. SQL Server
allows 2,100 parameters per statement and SQLite 500 ``SELECT`` terms per compound statement:
:data:`CHUNK` instances (two parameters each) stay well below both.

https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-capture-instance-ct-transact-sql
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdc_assets.lsn import Lsn, LsnRange

from .catalog import SourceTable
from .dbapi import DbapiConnection, fetch_all
from .quoting import change_table

__all__ = [
    "CHUNK",
    "changed_instances",
    "changes_per_instance_query",
    "established_instances",
    "instance_starts",
]

CHUNK = 200

# One branch per capture instance; {ordinal} is an integer the caller generates.
CHANGES_PER_INSTANCE_BRANCH = (
    "SELECT {ordinal} AS ordinal, COUNT_BIG(*) AS n FROM {change_table} "
    "WHERE [__$start_lsn] > ? AND [__$start_lsn] <= ?"
)


def changes_per_instance_query(names: Sequence[str]) -> str:
    """The statement counting the change rows of each instance of ``names`` in ``(?, ?]`` (the
    two parameters repeated per instance), one row ``(ordinal, n)`` per instance."""
    return "\nUNION ALL\n".join(
        CHANGES_PER_INSTANCE_BRANCH.format(ordinal=i, change_table=change_table(name))
        for i, name in enumerate(names)
    )


def changed_instances(
    conn: DbapiConnection,
    names: Sequence[str],
    lsn_range: LsnRange,
    *,
    among: Sequence[str] | None = None,
) -> dict[str, int]:
    """Change rows in ``lsn_range`` per capture instance of ``names`` (every name is in the
    answer, 0 for an instance without changes). One statement per :data:`CHUNK` instances.

    ``among``: a stable list that holds ``names`` (:func:`established_instances`). The
    statements are cut from it, not from ``names``, and only those holding a name asked for
    are sent: whichever tables a caller asks about (the sensor all of them, a run the quiet
    ones or the changed ones), the same texts come back, and the server compiles each once (a
    plan over 200 change tables is costly to make: ~0.15 s each in the emulator)."""
    wanted = set(names)
    order = list(among) if among is not None else list(names)
    order += sorted(wanted.difference(order))
    counts: dict[str, int] = {}
    for start in range(0, len(order), CHUNK):
        chunk = order[start : start + CHUNK]
        if wanted.isdisjoint(chunk):
            continue
        params = [lsn_range.lo.raw, lsn_range.hi.raw] * len(chunk)
        for ordinal, n in fetch_all(conn, changes_per_instance_query(chunk), *params):
            counts[chunk[int(ordinal)]] = int(n)
    missing = [n for n in names if n not in counts]
    if missing:  # a driver that dropped rows must not make a table look quiet
        raise RuntimeError(f"no change count came back for {', '.join(missing[:5])}")
    return {n: counts[n] for n in names}


def established_instances(catalog: Mapping[tuple[str, str], SourceTable]) -> list[str]:
    """Every established capture instance of the database (:func:`~.catalog.discover`), in
    order: the stable list :func:`changed_instances` cuts its statements from."""
    return sorted(
        instance.name
        for table in catalog.values()
        for instance in table.instances
        if instance.is_valid
    )


# https://learn.microsoft.com/en-us/sql/relational-databases/system-tables/cdc-change-tables-transact-sql
# ``start_lsn`` is what ``sys.fn_cdc_get_min_lsn`` returns: cleanup raises it as it deletes.
INSTANCE_STARTS_QUERY = "SELECT capture_instance, start_lsn FROM cdc.change_tables"


def instance_starts(conn: DbapiConnection) -> dict[str, Lsn | None]:
    """The low end of every capture instance's validity interval (None while the capture job
    has not established it), in one query: read after :func:`changed_instances` it proves that
    cleanup removed nothing under the count (a range counted empty is empty)."""
    return {
        str(name): Lsn.from_bytes(start) if start is not None and any(start) else None
        for name, start in fetch_all(conn, INSTANCE_STARTS_QUERY)
    }
