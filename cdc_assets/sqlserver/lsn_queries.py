"""The CDC LSN functions, one small function per statement (as Materialize's ``inspect.rs``).

The validity interval of a capture instance is [``fn_cdc_get_min_lsn(ci)``,
``fn_cdc_get_max_lsn()``]. The max LSN is NULL until the capture job has run once after CDC was
enabled — the one retryable condition (:class:`~.errors.CaptureNotReady`). The min LSN of an
instance is ``0x00…00`` both for an unknown instance and for one the capture job has not yet
established; :func:`get_min_lsn` tells the two apart with ``cdc.change_tables``.

https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/change-data-capture-functions-transact-sql
"""

from __future__ import annotations

import datetime as dt
import time

from cdc_assets.lsn import Lsn

from .dbapi import DbapiConnection, fetch_all, fetch_value
from .errors import CaptureInstanceNotFound, CaptureNotReady

__all__ = [
    "decrement_lsn",
    "find_max_lsn",
    "get_max_lsn",
    "get_min_lsn",
    "increment_lsn",
    "map_lsn_to_time",
    "map_time_to_lsn",
    "wait_for_max_lsn",
]


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-get-max-lsn-transact-sql
MAX_LSN_QUERY = "SELECT sys.fn_cdc_get_max_lsn()"


def get_max_lsn(conn: DbapiConnection) -> Lsn:
    """The highest LSN the capture job has processed (the top of every validity interval).

    Raises :class:`~.errors.CaptureNotReady` (retryable) while it is NULL.
    """
    value = fetch_value(conn, MAX_LSN_QUERY)
    if value is None:
        raise CaptureNotReady(
            "sys.fn_cdc_get_max_lsn() is NULL: the capture job has not processed any change yet."
        )
    return Lsn.from_bytes(value)


def find_max_lsn(conn: DbapiConnection) -> Lsn | None:
    """:func:`get_max_lsn`, or None while capture has not processed anything yet."""
    value = fetch_value(conn, MAX_LSN_QUERY)
    return None if value is None else Lsn.from_bytes(value)


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-get-min-lsn-transact-sql
MIN_LSN_QUERY = "SELECT sys.fn_cdc_get_min_lsn(?)"

# Only sent when the min LSN is 0x00…00, to tell "unknown" from "not established yet".
INSTANCE_START_QUERY = "SELECT start_lsn FROM cdc.change_tables WHERE capture_instance = ?"


def get_min_lsn(conn: DbapiConnection, capture_instance: str) -> Lsn:
    """The lowest LSN still available for ``capture_instance`` (moves up with cleanup)."""
    value = fetch_value(conn, MIN_LSN_QUERY, capture_instance, capture_instance=capture_instance)
    if value is not None and any(value):
        return Lsn.from_bytes(value)
    rows = fetch_all(conn, INSTANCE_START_QUERY, capture_instance)
    if not rows:
        raise CaptureInstanceNotFound(capture_instance, detail="sys.fn_cdc_get_min_lsn is 0x00")
    raise CaptureNotReady(
        f"Capture instance {capture_instance!r} exists but its start LSN is not established yet."
    )


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-increment-lsn-transact-sql
INCREMENT_LSN_QUERY = "SELECT sys.fn_cdc_increment_lsn(?)"


def increment_lsn(conn: DbapiConnection, lsn: Lsn) -> Lsn:
    """The next LSN as the server computes it (the lower bound of a range ``(lsn, …]``)."""
    return Lsn.from_bytes(fetch_value(conn, INCREMENT_LSN_QUERY, lsn.raw))


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-decrement-lsn-transact-sql
DECREMENT_LSN_QUERY = "SELECT sys.fn_cdc_decrement_lsn(?)"


def decrement_lsn(conn: DbapiConnection, lsn: Lsn) -> Lsn:
    """The previous LSN as the server computes it."""
    return Lsn.from_bytes(fetch_value(conn, DECREMENT_LSN_QUERY, lsn.raw))


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-map-lsn-to-time-transact-sql
LSN_TO_TIME_QUERY = "SELECT sys.fn_cdc_map_lsn_to_time(?)"


def map_lsn_to_time(conn: DbapiConnection, lsn: Lsn) -> dt.datetime | None:
    """The commit time (server local time, naive) of the transaction at ``lsn``; None if unknown."""
    value: dt.datetime | None = fetch_value(conn, LSN_TO_TIME_QUERY, lsn.raw)
    return value


COMMIT_TIME_AT_OR_BEFORE_QUERY = (
    "SELECT MAX(tran_end_time) FROM cdc.lsn_time_mapping WHERE start_lsn <= ? AND tran_id <> 0x00"
)


def commit_time_at_or_before(conn: DbapiConnection, lsn: Lsn) -> dt.datetime | None:
    """The commit time (server local time, naive) of the last transaction committed at or
    before ``lsn`` (a snapshot's LSN, which is no commit's); None when there is none."""
    value: dt.datetime | None = fetch_value(conn, COMMIT_TIME_AT_OR_BEFORE_QUERY, lsn.raw)
    return value


# https://learn.microsoft.com/en-us/sql/relational-databases/system-functions/sys-fn-cdc-map-time-to-lsn-transact-sql
TIME_TO_LSN_QUERY = "SELECT sys.fn_cdc_map_time_to_lsn(N'largest less than or equal', ?)"


def map_time_to_lsn(conn: DbapiConnection, when: dt.datetime) -> Lsn | None:
    """The commit LSN of the last transaction committed at or before ``when`` (server local
    time); None when there is none in ``cdc.lsn_time_mapping``."""
    value = fetch_value(conn, TIME_TO_LSN_QUERY, when)
    return Lsn.from_bytes(value) if value is not None else None


def wait_for_max_lsn(
    conn: DbapiConnection, target: Lsn, *, timeout_s: float = 60.0, poll_s: float = 0.5
) -> Lsn:
    """Poll :func:`get_max_lsn` until it reaches ``target`` (e.g. a snapshot LSN, DESIGN.md
    section 3); returns it. Raises :class:`~.errors.CaptureNotReady` on time-out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            current = get_max_lsn(conn)
        except CaptureNotReady:
            current = None
        if current is not None and current >= target:
            return current
        if time.monotonic() >= deadline:
            raise CaptureNotReady(
                f"The max LSN ({current}) did not reach {target} within {timeout_s:g} s.",
            )
        time.sleep(poll_s)
