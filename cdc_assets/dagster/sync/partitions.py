"""The partitions of a source: one dynamic partitions definition shared by its change logs and
mirrors, with the key ``snapshot`` and one ``<lo>-<hi>`` key per LSN range (DESIGN.md section 4).
The sync sensor adds the keys; :mod:`.chain` reads the chain from them."""

from dagster import DynamicPartitionsDefinition, Failure

from cdc_assets.lsn import LsnError, LsnRange

from .names import SNAPSHOT_PARTITION, partitions_name


def source_partitions(source: str) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=partitions_name(source))


def parse_partition(key: str) -> LsnRange | None:
    """None for ``snapshot``; the range for a range key; a clear failure for anything else."""
    if key == SNAPSHOT_PARTITION:
        return None
    try:
        return LsnRange.parse_key(key)
    except LsnError as exc:
        raise Failure(
            f"partition key {key!r} is neither 'snapshot' nor an LSN range '<lo>-<hi>' "
            f"(20 hex digits each): {exc}. Pick a partition the sync sensor created."
        ) from None
