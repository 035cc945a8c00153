"""The sync state's rows are changed by compare-and-swap: a row is replaced only where it still
holds what the writer read, inserted only where there is none, so two writers never undo each
other — through delta-rs (local storage) and through Spark's MERGE (object stores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdc_assets.spark import sync_state_store
from cdc_assets.spark.asset_store import AssetStore
from cdc_assets.spark.sync_state_store import read_rows, swap_rows

KEY = ["sync_state", "shop"]


@pytest.mark.parametrize("engine", ["delta-rs", "spark"])
def test_rows_change_only_where_they_hold_what_was_read(
    tmp_path: Path, spark: SparkSession, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AssetStore(tmp_path)
    if engine == "spark":  # what an object store gets: the same rules through Spark's MERGE
        monkeypatch.setattr(sync_state_store, "is_local", lambda _uri: False)
    swap_rows(spark, store, KEY, {"a": (None, "a1"), "b": (None, "b1")})
    assert read_rows(store, KEY) == {"a": "a1", "b": "b1"}

    # a writer that read a1 and b1 (and no c) changes them; one that read stale text does not
    swap_rows(spark, store, KEY, {"a": ("a1", "a2"), "b": ("b0", "b2"), "c": (None, "c1")})
    assert read_rows(store, KEY) == {"a": "a2", "b": "b1", "c": "c1"}

    # an insert of a row someone else inserted meanwhile leaves theirs
    swap_rows(spark, store, KEY, {"c": (None, "c-late")})
    assert read_rows(store, KEY) == {"a": "a2", "b": "b1", "c": "c1"}

    # nothing to change: no commit
    versions = len(store.history(KEY))
    swap_rows(spark, store, KEY, {"a": ("a2", "a2")})
    assert len(store.history(KEY)) == versions
