"""Incremental inputs: a downstream asset reads what changed in a mirror (or a history) since the
version it last consumed, instead of the whole table.

An asset asks for it with the input's metadata, as any IO-manager input mode::

    @asset(ins={"orders": AssetIn(mirror_key, metadata={"cdc_assets/read": "changes"})})
    def daily_orders(context, orders: TableChanges): ...

and gets a :class:`~cdc_assets.spark.change_feed.TableChanges`: the change data feed rows
(inserts, deletes, update pre- and post-images, each with its Delta version, commit timestamp and
the LSN that version reached) after the version it consumed last, up to the table's current
version; or, on a first run, after a re-snapshot rebuilt the table, or when the versions were
vacuumed or left the log, the whole table as of the current version (``full``; the reason is
said in one line of the run's log).

The downstream asset is unpartitioned (its latest materialization is its record). A change log
is not read this way: its range partitions are its changes already (a downstream asset depends
on them through a partition mapping). Where it last stopped is the downstream asset's own
record: the IO manager writes the versions each run consumed into the materialization it
records for the step's outputs (``cdc_assets/consumed``), and the next run starts after them. A
run that fails, or whose output is not recorded, leaves that record as it was: its re-execution
reads the same changes again (and more, if the table moved since), so an asset that recomputes
what the changes touch from the table at the version read (``TableChanges.table()``, pinned to
``read.to``) puts each change into its result exactly once.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from dagster import AssetKey, Failure, InputContext, MetadataValue, OutputContext
from pyspark.sql import SparkSession

from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.change_feed import FeedRead, TableChanges, changes_since

READ = "cdc_assets/read"  # input metadata: how to read the upstream asset
CHANGES = "changes"  # ... its changes since the version last consumed
CONSUMED = "cdc_assets/consumed"  # output metadata: per upstream asset, the versions consumed

# what each step in this process consumed, for its outputs: (run, step) -> key -> read; the
# oldest steps are let go past STEPS_KEPT (a warm run worker serves run after run)
_consumed: dict[tuple[str, str], dict[str, FeedRead]] = {}
_lock = threading.Lock()
STEPS_KEPT = 256


def reads_changes(context: InputContext) -> bool:
    """The input asks for the upstream table's changes (:data:`READ` = :data:`CHANGES`)."""
    return (context.definition_metadata or {}).get(READ) == CHANGES


def load_changes(context: InputContext, spark: SparkSession, store: AssetStore) -> TableChanges:
    """The upstream table's changes since the version the step's assets consumed last (their
    latest materialization's :data:`CONSUMED`), kept for :func:`consumed_metadata`."""
    upstream = context.asset_key
    if upstream.path[0] not in ("mirror", "history"):
        raise Failure(
            f"{upstream.to_user_string()}: '{READ}: {CHANGES}' reads the changes of a mirror or "
            "a history; a change log's range partitions are its changes already: depend on its "
            "partitions instead (a partition mapping), without this input metadata"
        )
    last = _last_consumed(context, upstream)
    what = upstream.path[0]
    uri = store.location(upstream.path)
    changes = changes_since(spark, uri, last, what=what)
    name = upstream.to_user_string()
    if changes.full:
        context.log.info(
            f"{name}: reading the whole {what} (version {changes.read.to}): {changes.reason}"
        )
    else:
        context.log.info(
            f"{name}: reading the changes of versions {changes.read.after} .. {changes.read.to} "
            f"(LSN {changes.after_lsn} .. {changes.to_lsn})"
        )
    step = context.step_context
    with _lock:
        _consumed.setdefault((step.run_id, step.step.key), {})[name] = changes.read
        while len(_consumed) > STEPS_KEPT:
            del _consumed[next(iter(_consumed))]
    return changes


def consumed_metadata(context: OutputContext) -> dict[str, Any]:
    """:data:`CONSUMED` for the step's output: what its incremental inputs read (empty when it
    has none)."""
    with _lock:
        found = _consumed.get((context.run_id, context.step_key))
    if not found:
        return {}
    return {CONSUMED: MetadataValue.json({k: r.as_metadata() for k, r in sorted(found.items())})}


def _last_consumed(context: InputContext, upstream: AssetKey) -> FeedRead | None:
    """What the step's assets consumed of ``upstream`` in their latest materializations: the
    earliest of them (several assets of one step re-read from the one that is furthest behind);
    None when one of them never consumed it."""
    outputs = sorted(context.step_context.get_output_asset_keys(), key=lambda k: k.path)
    reads = [_recorded(context, key, upstream) for key in outputs]
    if not reads or any(r is None for r in reads):
        return None
    found = [r for r in reads if r is not None]
    if len({r.table_id for r in found}) > 1:
        return None
    return min(found, key=lambda r: r.to)


def _recorded(context: InputContext, downstream: AssetKey, upstream: AssetKey) -> FeedRead | None:
    event = context.instance.get_latest_materialization_event(downstream)
    materialization = event.asset_materialization if event is not None else None
    if materialization is None:
        return None
    value = materialization.metadata.get(CONSUMED)
    found = getattr(value, "value", value)
    if not isinstance(found, Mapping):
        return None
    return FeedRead.from_metadata(found.get(upstream.to_user_string()))
