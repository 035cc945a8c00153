"""Benchmark: what the writer's compaction costs a range, and what it saves the readers.

A range every few seconds adds a file to each table it touches. This writes ``--ranges`` small
ranges (default 600: about half an hour of ``make demo`` at 20 tx/s for one table) into two
copies of a change log (a partition each, written by delta-rs as the change-log step writes a
small range) and two copies of a keyed mirror with deletion vectors (a driver merge each, as
the mirror step merges a small range): one copy compacted by its writer after every commit
(:func:`cdc_assets.spark.compaction.compact_after_commit`), the other never (the baseline: what
main did between maintenance runs). No Spark: the paths ``make demo``'s small tables take.

Prints, per range: the commit's and the compaction's milliseconds (p50, p95, max) and their
ratio; at the end, each copy's live data files, the bytes the compactions rewrote per byte the
ranges wrote, and the time to read every 10th range's partition (the mirror step's read) and the
whole mirror (DuckDB) from each copy. Targets: the compaction's p95 at most 0.5x the commit's
p95 (its share of a range run stays small); files at most 64 per table (the soak's bound).

    .venv/bin/python benchmarks/compaction.py             # 600 ranges
    .venv/bin/python benchmarks/compaction.py --quick     # 100 ranges
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(1, str(ROOT))  # the project of this checkout, its test support too

import pyarrow as pa  # noqa: E402
from _common import machine_line  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from cdc_assets.lsn import Lsn  # noqa: E402
from cdc_assets.spark import delta_log  # noqa: E402
from cdc_assets.spark.asset_store import AssetStore  # noqa: E402
from cdc_assets.spark.compaction import compact_after_commit  # noqa: E402
from cdc_assets.spark.deletion_vector_commits import deletion_vectors_turned_on  # noqa: E402
from cdc_assets.spark.delta_location import local_path  # noqa: E402
from cdc_assets.spark.driver_writes import RowsInDriver  # noqa: E402
from cdc_assets.spark.merge_with_deletion_vectors import deletion_vector_merge_keyed  # noqa: E402
from cdc_assets_tests.support.outside_spark import read_with_duckdb  # noqa: E402

MIRROR_ROWS = 20_000
CHANGES = (5, 40)  # changes per range (uniform)
TARGET_RATIO = 0.5
TARGET_FILES = 64
DATA = [
    T.StructField("id", T.LongType()),
    T.StructField("name", T.StringType()),
    T.StructField("qty", T.IntegerType()),
    T.StructField("note", T.StringType()),
]
CHANGE_SCHEMA = T.StructType(
    [
        T.StructField("__$start_lsn", T.BinaryType()),
        T.StructField("__$command_id", T.IntegerType()),
        T.StructField("__$seqval", T.BinaryType()),
        T.StructField("__$operation", T.IntegerType()),
        *DATA,
    ]
)


def _changes(rng: random.Random, n: int, keys: int) -> pa.Table:
    """A range's change rows: updates (before and after images), inserts past the keys, deletes."""
    rows = []
    for step in range(rng.randint(*CHANGES)):
        lsn, seq = Lsn.from_int(n * 1000 + step).raw, Lsn.from_int(step).raw
        key = rng.randrange(keys)
        value = (f"name {n}.{step}", rng.randrange(1000), "x" * rng.randrange(60))
        kind = rng.random()
        if kind < 0.1:
            rows.append((lsn, 1, seq, 1, key, *value))
        elif kind < 0.2:
            rows.append((lsn, 1, seq, 2, keys + n * 100 + step, *value))
        else:
            rows.append((lsn, 1, seq, 3, key, *value))
            rows.append((lsn, 1, seq, 4, key, *value))
    names = [f.name for f in CHANGE_SCHEMA.fields]
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows])


def _create_mirror(store: AssetStore, key: list[str]) -> None:
    from deltalake import write_deltalake

    rows = pa.table(
        {
            "id": pa.array(range(MIRROR_ROWS), pa.int64()),
            "name": [f"name {i}" for i in range(MIRROR_ROWS)],
            "qty": pa.array([i % 1000 for i in range(MIRROR_ROWS)], pa.int32()),
            "note": ["" for _ in range(MIRROR_ROWS)],
        }
    )
    uri = store.location(key)
    write_deltalake(uri, rows, configuration={"delta.enableChangeDataFeed": "true"})
    assert deletion_vectors_turned_on(local_path(uri))


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _percentiles(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"p50 {statistics.median(ms):6.1f} ms, p95 {_p95(ms):6.1f}, max {max(ms):6.1f}"


def _rewritten_bytes(uri: str) -> int:
    """Bytes the table's compactions wrote (their commits' metrics)."""
    total = 0
    for path in delta_log.log_folder(local_path(uri)).glob("*.json"):
        for line in path.read_text().splitlines():
            info = json.loads(line).get("commitInfo") or {}
            if info.get("operation") == "OPTIMIZE":
                total += int(info["operationMetrics"].get("numAddedBytes", 0))
    return total


def _data_bytes(uri: str) -> int:
    """Bytes of the data files ever written (all still there: nothing is vacuumed here)."""
    return sum(p.stat().st_size for p in local_path(uri).glob("*.parquet"))


LOGS = {"compacted": ["cdc", "compacted"], "never": ["cdc", "never"]}
MIRRORS = {"compacted": ["mirror", "compacted"], "never": ["mirror", "never"]}


def _partition(n: int) -> str:
    return f"{n * 10:020x}-{n * 10 + 10:020x}"


def _write_ranges(store: AssetStore, ranges: int) -> dict[str, list[float]]:
    """Every range into both copies; the compacted copies' commit and compaction seconds."""
    rng = random.Random(7)
    seconds: dict[str, list[float]] = {k: [] for k in ("log", "log+", "mirror", "mirror+")}
    for n in range(ranges):
        changes = _changes(rng, n, MIRROR_ROWS)
        rows = RowsInDriver(CHANGE_SCHEMA, lambda changes=changes: changes)
        for copy in ("compacted", "never"):
            started = time.perf_counter()
            properties = {"n": n}
            store.write_in_driver(
                None,  # type: ignore[arg-type]  # delta-rs writes it: no Spark
                rows,
                LOGS[copy],
                _partition(n),
                lambda _, properties=properties: properties,
            )
            written = time.perf_counter()
            if copy == "compacted":
                compact_after_commit(None, store, LOGS[copy])
                seconds["log"].append(written - started)
                seconds["log+"].append(time.perf_counter() - written)
            started = time.perf_counter()
            merged = deletion_vector_merge_keyed(
                store,
                MIRRORS[copy],
                rows,
                key_columns=["id"],
                snapshot_lsn=None,
                properties={"lsn": Lsn.from_int(n * 1000 + 999).hex},
            )
            assert merged is not None, n
            written = time.perf_counter()
            if copy == "compacted":
                compact_after_commit(None, store, MIRRORS[copy])
                seconds["mirror"].append(written - started)
                seconds["mirror+"].append(time.perf_counter() - written)
    return seconds


def _report_costs(seconds: dict[str, list[float]]) -> bool:
    ok = True
    for table in ("log", "mirror"):
        commit, compaction = seconds[table], seconds[f"{table}+"]
        ratio = _p95(compaction) / _p95(commit)
        ok &= ratio <= TARGET_RATIO
        print(f"  {table:<6} commit     {_percentiles(commit)}")
        print(
            f"  {table:<6} compaction {_percentiles(compaction)}  (p95 {ratio:.2f}x the commit's)"
        )
    return ok


def _report_copy(store: AssetStore, copy: str, ranges: int) -> bool:
    """Files and reads of one copy; its files within the target."""
    log_uri, mirror_uri = store.location(LOGS[copy]), store.location(MIRRORS[copy])
    files = {}
    for name, uri in (("change log", log_uri), ("mirror", mirror_uri)):
        state = delta_log.read(local_path(uri))
        assert state is not None
        files[name] = len(state.files)
    started = time.perf_counter()
    read = range(0, ranges, 10)
    for n in read:
        found = store.rows_in_driver(LOGS[copy], [_partition(n)])
        assert found is not None
        found.read()
    log_read = time.perf_counter() - started
    read_with_duckdb(mirror_uri, ["id"])  # the extension loaded, the files in the page cache
    started = time.perf_counter()
    mirror_rows = len(read_with_duckdb(mirror_uri, ["id"]))
    mirror_read = time.perf_counter() - started
    print(
        f"  {copy:<9} files: change log {files['change log']:4d}, mirror {files['mirror']:4d}; "
        f"read {len(read)} ranges {log_read:5.2f} s, "
        f"the mirror ({mirror_rows:,} rows, DuckDB) {mirror_read:5.2f} s"
    )
    if copy == "compacted":
        for name, uri in (("change log", log_uri), ("mirror", mirror_uri)):
            rewritten = _rewritten_bytes(uri)
            per_byte = rewritten / max(_data_bytes(uri) - rewritten, 1)
            print(f"  {'':<9} {name}: compactions rewrote {per_byte:.1f} bytes per byte written")
    return max(files.values()) <= TARGET_FILES or copy != "compacted"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranges", type=int, default=600)
    parser.add_argument("--quick", action="store_true", help="100 ranges")
    args = parser.parse_args()
    ranges = 100 if args.quick else args.ranges
    print(
        f"{ranges} ranges of {CHANGES[0]}-{CHANGES[1]} changes into a change log and a "
        f"{MIRROR_ROWS:,}-row mirror with deletion vectors, two copies of each"
    )
    with tempfile.TemporaryDirectory(prefix="cdc_assets_bench_") as directory:
        store = AssetStore(Path(directory))
        for key in MIRRORS.values():
            _create_mirror(store, key)
        ok = _report_costs(_write_ranges(store, ranges))
        for copy in ("compacted", "never"):
            ok &= _report_copy(store, copy, ranges)
    print(
        f"compaction p95 <= {TARGET_RATIO}x the commit's, files <= {TARGET_FILES} per table: "
        f"{'met' if ok else 'MISSED'}"
    )
    print(machine_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
