"""Names a person sees in the Dagster UI: asset keys, partitions, jobs, sensors, tags.

A captured table is three assets, one per stage, each named so that its last key part (the box
title in the lineage graph, the name in the catalog) says the stage:

- ``sqlserver/<source>/<schema>/<table>``: the SQL Server table (external);
- ``cdc/<source>/<schema>/<table>_changes``: its change log;
- ``mirror/<source>/<schema>/<table>_mirror``: its current state;
- ``history/<source>/<schema>/<table>_history``: its versions (SCD type 2), where the source's
  ``history`` settings name the table.

These keys are what users' downstream assets depend on: they do not change. Dagster allows only
letters, digits and ``_`` in a key part, so other characters (spaces, dots, unicode) become ``_``
and a short hash of the real name keeps two tables apart that would otherwise collide; the real
name stays in the asset's metadata.
"""

from __future__ import annotations

import hashlib
import re

from dagster import AssetKey

SNAPSHOT_PARTITION = "snapshot"
SOURCE_TAG = "cdc_assets/source"
# On range runs only (value: the source): the run queue's limit of one per source keeps a source's
# ranges in order, while its snapshot runs (which do not carry it) go beside them.
RANGE_LANE_TAG = "cdc_assets/range_lane"
# on every run of a source's health and maintenance jobs (:mod:`..housekeeping`): <source name>
HOUSEKEEPING_TAG = "cdc_assets/housekeeping"
# On snapshot runs of a few tables: their names (a run executed in process records no asset
# selection, so the sensor reads the tables a snapshot run in flight works on from here).
SNAPSHOT_OF_TAG = "cdc_assets/snapshot_of"
PARTITION_TAG = "cdc_assets/partition"
TABLES_TAG = "cdc_assets/source_tables"  # how many tables the source has (a run may select few)
CATCH_UP_TAG = "cdc_assets/catch_up"  # on runs that bring tables left behind up to the chain
RESNAPSHOT_TAG = "cdc_assets/resnapshot_reason"  # on snapshot runs the sensor starts after a gap
PARTITION_RUN_TAG = "dagster/partition"  # Dagster's tag of a partitioned run
IO_MANAGER = "cdc_io_manager"  # the resource key of the Delta IO manager
COVERAGE = "coverage"  # the change-log checks (:mod:`..change_log_checks`)
CHAIN = "chain"
CHANGE_LOG_CHECKS = (COVERAGE, CHAIN)  # the checks that run with every change-log partition
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_]")


def key_part(name: str) -> str:
    """``name`` as an asset key part (unchanged when it is already a valid one)."""
    cleaned = _NOT_ALLOWED.sub("_", name)
    if cleaned == name and name:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{cleaned}_{digest}"


def source_table_key(source: str, schema: str, table: str) -> AssetKey:
    return AssetKey(["sqlserver", source, key_part(schema), key_part(table)])


def change_log_key(source: str, schema: str, table: str) -> AssetKey:
    return AssetKey(["cdc", source, key_part(schema), f"{key_part(table)}_changes"])


def mirror_key(source: str, schema: str, table: str) -> AssetKey:
    return AssetKey(["mirror", source, key_part(schema), f"{key_part(table)}_mirror"])


def history_key(source: str, schema: str, table: str) -> AssetKey:
    return AssetKey(["history", source, key_part(schema), f"{key_part(table)}_history"])


def partitions_name(source: str) -> str:
    return f"{source}_lsn"


def sync_job_name(source: str) -> str:
    return f"{source}_sync"


def health_job_name(source: str) -> str:
    return f"{source}_health"


def maintenance_job_name(source: str) -> str:
    return f"{source}_maintenance"


def sensor_name(source: str) -> str:
    return f"{source}_sync_sensor"


def group_name(source: str) -> str:
    return f"cdc_{source}"
