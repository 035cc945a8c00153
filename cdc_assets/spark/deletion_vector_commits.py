"""Committing a driver-side merge with deletion vectors to the Delta log as Spark's MERGE would
(see :mod:`.merge_with_deletion_vectors`): the table features it may write, the commit info and
operation parameters, the checkpoint every ``delta.checkpointInterval`` commits."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import delta_log
from .asset_store import AssetStore
from .commit_metadata import Published, to_json
from .delta_location import is_local, local_path
from .mirror_merge import DELETE

WRITER_FEATURES = frozenset(
    {
        "deletionVectors",
        "changeDataFeed",
        "timestampNtz",
        # legacy features: nothing to do while the table uses none of them (is_writable)
        "appendOnly",
        "invariants",
        "checkConstraints",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
    }
)

log = logging.getLogger(__name__)


# what a schema holds when it uses invariants, generated or identity columns
UNUSED_FEATURE_MARKS = ("delta.invariants", "delta.generationExpression", "delta.identity")


READER_FEATURES = frozenset({"deletionVectors", "timestampNtz"})


CHECKPOINT_INTERVAL = 10  # Delta's default delta.checkpointInterval


def writable_log(
    store: AssetStore, key_path: Sequence[str]
) -> tuple[Path, str, delta_log.TableLog] | None:
    """The table's folder, URI and log, when it is local and this module writes what its
    protocol asks (:func:`is_writable`); None when Spark must write it."""
    uri = store.location(key_path)
    if not is_local(uri):
        return None
    table = local_path(uri)
    state = delta_log.read(table)
    if state is None or not is_writable(state):
        return None
    return table, uri, state


def commit_actions(
    table: Path,
    uri: str,
    state: delta_log.TableLog,
    parameters: Mapping[str, str],
    adds: list[dict[str, Any]],
    metrics: Mapping[str, int],
    properties: Mapping[str, Any],
) -> Published | None:
    """The next version: ``adds`` and a MERGE's commitInfo; None when another writer made it."""
    text = to_json(properties)
    info = commit_info(state, "MERGE", parameters, metrics, text=text)
    version = commit_next(table, state, [info, *adds])
    if version is None:
        log.warning(
            "%s: version %d was committed by another writer; Spark merges", uri, state.version + 1
        )
        return None
    return Published(uri, version, dict(properties), dict(metrics), text)


def commit_next(
    table: Path, state: delta_log.TableLog, actions: list[dict[str, Any]]
) -> int | None:
    """Commit ``actions`` as the version after ``state``'s, with the checkpoint Spark writes at
    ``delta.checkpointInterval`` (of the table as ``state`` holds it); the version, or None when
    another writer made it."""
    version = state.version + 1
    if not delta_log.commit(table, version, actions):
        return None
    if version % checkpoint_interval(state) == 0:
        write_checkpoint(table, version)
    return version


def write_checkpoint(table: Path, version: int) -> None:
    """The checkpoint of ``version``, as Spark's commit of a checkpoint version writes one (every
    ``delta.checkpointInterval``), so the log stays short for every reader however many commits
    come from here. delta-rs writes it (one Parquet file, deletion vectors and column mapping
    kept; Spark, DuckDB and :mod:`.delta_log` read it). The commit stands if it fails: the next
    checkpoint version writes one. Then, as Spark does after its checkpoints, the log files
    older than ``delta.logRetentionDuration`` are deleted (:func:`clean_expired_log`): a table
    written only from here would otherwise keep every commit file forever."""
    from deltalake import DeltaTable

    started = time.perf_counter()
    try:
        checkpointed = DeltaTable(str(table), version=version)
        checkpointed.create_checkpoint()
    except Exception as error:  # a checkpoint is an optimisation; the commit is made
        log.warning("%s: no checkpoint of version %d: %s", table, version, error)
        return
    clean_expired_log(table, checkpointed)
    log.info(
        "%s: checkpoint of version %d in %.2f s", table, version, time.perf_counter() - started
    )


def clean_expired_log(table: Path, opened: Any) -> None:
    """Delete the log files (commits, checkpoints) older than the table's
    ``delta.logRetentionDuration`` that no version within it needs (delta-rs's
    ``cleanup_metadata``: only those before a checkpoint older than the retention), unless the
    table sets ``delta.enableExpiredLogCleanup`` false; and the checksum files Spark writes
    beside commits that are gone. ``opened``: the table as delta-rs opened it. Best effort: a
    failure is logged, the next checkpoint tries again."""
    configuration = opened.metadata().configuration
    if configuration.get("delta.enableExpiredLogCleanup", "true").lower() == "false":
        return
    try:
        opened.cleanup_metadata()
        folder = delta_log.log_folder(table)
        commits = [int(p.name[:20]) for p in folder.glob("*.json") if p.name[:20].isdigit()]
        oldest = min(commits, default=0)
        for checksum in folder.glob("*.crc"):
            if checksum.name[:20].isdigit() and int(checksum.name[:20]) < oldest:
                checksum.unlink(missing_ok=True)
    except Exception as error:  # the log stays as it is until the next checkpoint
        log.warning("%s: expired log files not cleaned up: %s", table, error)


def commit_info(
    state: delta_log.TableLog,
    operation: str,
    parameters: Mapping[str, str],
    metrics: Mapping[str, int],
    *,
    text: str | None = None,
    blind_append: bool = False,
) -> dict[str, Any]:
    """The commit's ``commitInfo`` as Spark writes it for ``operation`` (``MERGE``'s metric
    names in ``metrics``), ``text`` its userMetadata."""
    info: dict[str, Any] = {
        "timestamp": int(time.time() * 1000),
        "operation": operation,
        "operationParameters": dict(parameters),
        "readVersion": state.version,
        "isolationLevel": "Serializable",
        "isBlindAppend": blind_append,
        "operationMetrics": {k: str(v) for k, v in metrics.items()},
        "engineInfo": "cdc_assets (deletion vectors in the driver)",
        "txnId": str(uuid.uuid4()),
    }
    if text is not None:
        info["userMetadata"] = text
    return {"commitInfo": info}


def keyed_parameters(key_columns: Sequence[str]) -> dict[str, str]:
    """The operationParameters of the keyed MERGE (as :func:`.spark_merges.spark_merge_keyed`)."""
    return {
        "predicate": json.dumps([" AND ".join(f"t.{k} = s.{k}" for k in key_columns)]),
        "matchedPredicates": json.dumps(
            [
                {"predicate": f"s.action = {DELETE}", "actionType": "delete"},
                {"actionType": "update"},
            ]
        ),
        "notMatchedPredicates": json.dumps(
            [{"predicate": f"s.action <> {DELETE}", "actionType": "insert"}]
        ),
        "notMatchedBySourcePredicates": "[]",
    }


def multiset_parameters(columns: Sequence[str]) -> dict[str, str]:
    """The operationParameters of the keyless MERGE (as
    :func:`.spark_merges.spark_merge_multiset`)."""
    on = " AND ".join(f"t.{c} <=> s.{c}" for c in columns)
    return {
        "predicate": json.dumps([f"s.action = 'd' AND {on}"]),
        "matchedPredicates": json.dumps([{"actionType": "delete"}]),
        "notMatchedPredicates": json.dumps(
            [{"predicate": "s.action = 'i'", "actionType": "insert"}]
        ),
        "notMatchedBySourcePredicates": "[]",
    }


def is_writable(state: delta_log.TableLog) -> bool:
    """Whether the table's protocol asks only for what this module writes: deletion vectors,
    Change Data Feed, timestamp_ntz, and legacy features (implied when Spark upgraded an older
    protocol) that ask nothing of a writer while the table uses none of them."""
    protocol, metadata = state.protocol, state.metadata
    configuration = metadata.get("configuration") or {}
    schema = metadata.get("schemaString", "")
    return (
        configuration.get("delta.enableDeletionVectors") == "true"
        and configuration.get("delta.appendOnly") != "true"
        and configuration.get("delta.columnMapping.mode", "none") == "none"
        and not any(k.startswith("delta.constraints.") for k in configuration)
        and not metadata.get("partitionColumns")
        and int(protocol.get("minWriterVersion", 0)) == 7
        and int(protocol.get("minReaderVersion", 0)) == 3
        and set(protocol.get("writerFeatures") or []) <= WRITER_FEATURES
        and set(protocol.get("readerFeatures") or []) <= READER_FEATURES
        and not any(word in schema for word in UNUSED_FEATURE_MARKS)
    )


def checkpoint_interval(state: delta_log.TableLog) -> int:
    configuration = state.metadata.get("configuration") or {}
    return int(configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL))


# The table features a legacy protocol version implies (Delta's protocol: writer versions 2-6,
# reader version 2); a table-features protocol lists them explicitly.
_LEGACY_WRITER_FEATURES = (
    (2, ("appendOnly", "invariants")),
    (3, ("checkConstraints",)),
    (4, ("changeDataFeed", "generatedColumns")),
    (5, ("columnMapping",)),
    (6, ("identityColumns",)),
)


def deletion_vectors_turned_on(table: Path) -> bool:
    """Turn deletion vectors on for the local table (a mirror delta-rs created small), as Spark's
    ``ALTER TABLE ... SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')`` does: one
    commit of the table's metadata with the property and its protocol with the
    ``deletionVectors`` feature (reader 3, writer 7, the features its legacy versions implied
    listed), with no Spark job. True when they are on (already, or now); False, nothing
    committed, where Spark must do it: a log this module does not read, a feature it does not
    write, or a commit lost to another writer."""
    state = delta_log.read(table)
    if state is None:
        return False
    configuration = dict(state.metadata.get("configuration") or {})
    if configuration.get("delta.enableDeletionVectors") == "true":
        return True
    protocol = state.protocol
    reader, writer = (
        int(protocol.get("minReaderVersion", 1)),
        int(protocol.get("minWriterVersion", 1)),
    )
    if reader not in (1, 3) or writer < 2:
        return False
    readers = list(protocol.get("readerFeatures") or [])
    writers = list(protocol.get("writerFeatures") or [])
    if writer < 7:
        writers = [
            f for version, names in _LEGACY_WRITER_FEATURES if version <= writer for f in names
        ]
    readers += [] if "deletionVectors" in readers else ["deletionVectors"]
    writers += [] if "deletionVectors" in writers else ["deletionVectors"]
    configuration["delta.enableDeletionVectors"] = "true"
    upgraded = delta_log.TableLog(
        state.version,
        {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": readers,
            "writerFeatures": writers,
        },
        {**state.metadata, "configuration": configuration},
    )
    if not is_writable(upgraded):
        return False
    properties = {"properties": json.dumps({"delta.enableDeletionVectors": "true"})}
    info = commit_info(state, "SET TBLPROPERTIES", properties, {}, blind_append=True)
    actions = [info, {"metaData": upgraded.metadata}, {"protocol": upgraded.protocol}]
    return commit_next(table, upgraded, actions) is not None
