"""Columns excluded or masked, end to end through the real definitions (issue 41, privacy).

Known personal values are written into two tables of an emulated source, the tables are synced
(snapshot, then a range) by the real sensor and runs, and then every byte of every file under
the storage path and the Dagster instance's folder is searched for them, as UTF-8 and UTF-16-LE:
none may be there, while the hashed e-mail addresses still join the two mirrors. A changed rule
re-snapshots the table and says so; bad rules stop the definitions with one line, nothing
written."""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterInstance, instance_for_test
from pyspark.sql import SparkSession

from cdc_assets import emulator
from cdc_assets.config import ConfigError, ProjectConfig, parse_config
from cdc_assets.dagster.definitions_builder import build_definitions
from cdc_assets.dagster.sync.change_log_state import snapshot_info
from cdc_assets.dagster.sync.source import load_source
from cdc_assets.sqlserver import cdc_admin
from cdc_assets.workload import TableDef, create_demo_database
from cdc_assets.workload.demo_schema import ColumnDef

from .conftest import SOURCE, SyncHarness, failure_text

KEY_ENV = "CDC_TEST_PII_HASH_KEY"
SECRET = "pii-test-hash-key-7f3a9c"

CUSTOMERS = TableDef(
    "dbo",
    "customers",
    (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("email", "nvarchar(100)"),
        ColumnDef("ssn", "varchar(30)"),
        ColumnDef("phone", "nvarchar(30)"),
        ColumnDef("card", "bigint"),
        ColumnDef("city", "nvarchar(30)"),
    ),
    primary_key=("id",),
)
PURCHASES = TableDef(
    "dbo",
    "purchases",
    (
        ColumnDef("id", "int", nullable=False),
        ColumnDef("buyer_email", "nvarchar(100)"),
        ColumnDef("amount", "int"),
    ),
    primary_key=("id",),
)
RULES: list[dict[str, Any]] = [
    {"tables": "dbo.customers", "columns": ["ssn"], "rule": "exclude"},
    {"tables": "dbo.*", "columns": ["email", "buyer_email"], "rule": "hash"},
    {"tables": "dbo.customers", "columns": ["phone"], "rule": "redact"},
    {"tables": "dbo.customers", "columns": ["card"], "rule": "null"},
]
CARD = 4111111111111111
EMAILS = {i: f"pii-{name}@example.com" for i, name in enumerate(("alice", "bob", "dan", "eve"), 1)}
RAW_TEXTS = [
    *EMAILS.values(),
    "pii-carol@example.com",
    "pii-ssn-123-45-6789",
    "pii-ssn-999-00-1111",
    "pii-phone-555-0100",
    "pii-phone-555-0199",
    str(CARD),
    SECRET,
]


def hashed(value: str) -> str:
    return hmac.new(SECRET.encode(), value.encode(), hashlib.sha256).hexdigest()


@pytest.fixture
def dagster_home() -> Iterator[tuple[Path, DagsterInstance]]:
    where = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with (
        tempfile.TemporaryDirectory(dir=where, prefix="dagster-pii-") as home,
        instance_for_test(temp_dir=home) as instance,
    ):
        yield Path(home), instance


def make_config(
    tmp_path: Path, db: Path, rules: list[dict[str, Any]], history: dict[str, Any] | None = None
) -> ProjectConfig:
    return parse_config(
        {
            "sources": [
                {
                    "name": SOURCE,
                    "connection": {"emulator": {"path": str(db)}},
                    "snapshot": {"chunk_rows": 2},  # customers: key ranges read by Spark tasks
                    "columns": {"hash_key_env": KEY_ENV, "rules": rules},
                    **({"history": history} if history is not None else {}),
                }
            ],
            "storage": {"base_path": str(tmp_path / "storage")},
            "spark": {"master": "local[2]"},
        },
        base_dir=tmp_path,
        origin="test config",
    )


def pii_database(tmp_path: Path) -> Path:
    db = tmp_path / "source.db"
    conn = emulator.connect(str(db), autocommit=True)
    try:
        create_demo_database(
            conn, rows_per_table=0, tables=(CUSTOMERS, PURCHASES), polling_interval=None
        )
        for i, email in EMAILS.items():
            conn.execute(
                "INSERT INTO [dbo].[customers] VALUES (?, ?, ?, ?, ?, ?)",
                i,
                email,
                "pii-ssn-123-45-6789",
                "pii-phone-555-0100",
                CARD,
                f"city{i}",
            )
        for i, (buyer, amount) in enumerate(((1, 10), (2, 20), (1, 30)), 1):
            conn.execute("INSERT INTO [dbo].[purchases] VALUES (?, ?, ?)", i, EMAILS[buyer], amount)
    finally:
        conn.close()
    emulator.scan(db)
    return db


def build(
    tmp_path: Path,
    db: Path,
    rules: list[dict[str, Any]],
    spark: SparkSession,
    instance: Any,
    history: dict[str, Any] | None = None,
) -> SyncHarness:
    config = make_config(tmp_path, db, rules, history)
    source = load_source(config.sources[0], config.storage.base_path)
    defs = build_definitions(config, [source])
    return SyncHarness(db, source, defs, instance, None, spark, config=config)  # type: ignore[arg-type]


def found_in(root: Path, needles: dict[str, bytes]) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{label} in {path}" for label, needle in needles.items() if needle in data]
    return hits


def needles() -> dict[str, bytes]:
    found = {}
    for text in RAW_TEXTS:
        found[f"{text!r} (UTF-8)"] = text.encode("utf-8")
        found[f"{text!r} (UTF-16-LE)"] = text.encode("utf-16-le")
    found["card number (int64 LE)"] = struct.pack("<q", CARD)
    found["card number (int64 BE)"] = struct.pack(">q", CARD)
    return found


def table(harness: SyncHarness, name: str) -> Any:
    return next(t for t in harness.source.tables if t.name == name)


def test_personal_values_never_reach_the_lake_or_dagster(
    tmp_path: Path,
    spark: SparkSession,
    dagster_home: tuple[Path, DagsterInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    home, instance = dagster_home
    db = pii_database(tmp_path)
    harness = build(tmp_path, db, RULES, spark, instance)
    assert harness.sync() >= 1  # the snapshots (customers in several Spark chunks), a range

    harness.write(
        "INSERT INTO [dbo].[customers] VALUES (5, N'pii-carol@example.com', "
        "'pii-ssn-999-00-1111', N'pii-phone-555-0199', 4111111111111111, N'city5')"
    )
    harness.write("UPDATE [dbo].[customers] SET [phone] = N'pii-phone-555-0199' WHERE [id] = 1")
    harness.write("INSERT INTO [dbo].[purchases] VALUES (4, N'pii-carol@example.com', 40)")
    harness.write("DELETE FROM [dbo].[purchases] WHERE [id] = 2")
    assert harness.sync() >= 1  # a range through the real definitions

    customers = table(harness, "customers")
    purchases = table(harness, "purchases")
    mirror = harness.mirror(customers)
    assert mirror.columns == ["id", "email", "phone", "card", "city"]  # no ssn
    rows = {r["id"]: r.asDict() for r in mirror.collect()}
    assert rows[1] == {
        "id": 1,
        "email": hashed("pii-alice@example.com"),
        "phone": "****",
        "card": None,
        "city": "city1",
    }
    assert rows[5]["email"] == hashed("pii-carol@example.com") and len(rows) == 5

    # the hashed columns join across the two tables
    bought = harness.mirror(purchases)
    joined = bought.join(mirror, bought["buyer_email"] == mirror["email"])
    assert sorted(
        (r["id"], r["amount"]) for r in joined.select(mirror["id"], "amount").collect()
    ) == [
        (1, 10),
        (1, 30),
        (5, 40),
    ]

    # every byte the project and Dagster stored: no raw value, no key
    storage = Path(harness.source.storage)
    assert any(storage.rglob("*.parquet")) and any(storage.rglob("_delta_log/*.json"))
    assert any(home.rglob("*")), "the Dagster instance stored nothing"
    hits = found_in(storage, needles()) + found_in(home, needles())
    assert not hits, hits[:10]
    # the search does find what is there: an unmasked value in the lake, the raw ones at the source
    assert found_in(storage, {"city3": b"city3"})
    assert any("source.db" in hit for hit in found_in(db.parent, needles()))

    # the column list in the UI says which columns are masked and how, never the key
    key = AssetKey(customers.mirror_key.path)
    metadata = harness.defs.resolve_assets_def(key).metadata_by_key[key]
    described = {c.name: c.description for c in metadata["dagster/column_schema"].columns}
    assert set(described) == {"id", "email", "phone", "card", "city"}
    assert "masked: hash (HMAC-SHA256, hex) of nvarchar(100)" in (described["email"] or "")
    assert "masked: redact" in (described["phone"] or "")
    assert "masked: null" in (described["card"] or "")
    assert "masked" not in (described["city"] or "")
    rules_text = str(metadata["cdc_assets/column_rules"])
    assert "email: hash" in rules_text and "ssn: excluded" in rules_text
    assert SECRET not in rules_text


def test_a_changed_rule_resnapshots_the_table_and_says_so(
    tmp_path: Path,
    spark: SparkSession,
    dagster_home: tuple[Path, DagsterInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    _, instance = dagster_home
    db = pii_database(tmp_path)
    harness = build(tmp_path, db, RULES, spark, instance)
    harness.sync()
    harness.write("INSERT INTO [dbo].[purchases] VALUES (8, N'pii-y@example.com', 1)")
    harness.sync()  # a range: the mirrors are built
    customers = table(harness, "customers")
    assert {r["city"] for r in harness.mirror(customers).collect()} == {f"city{i}" for i in EMAILS}

    # a new rule: customers.city stored as null from now on
    changed = [*RULES, {"tables": "dbo.customers", "columns": ["city"], "rule": "null"}]
    harness = build(tmp_path, db, changed, spark, instance)
    harness.write("INSERT INTO [dbo].[purchases] VALUES (9, N'pii-x@example.com', 1)")
    (request,) = harness.tick().run_requests
    result = harness.execute(request)
    # the customers' range is refused (nothing written for it): the table waits for its
    # re-snapshot, and the run does not fail for it
    assert result.success, failure_text(result)
    evaluations = result.get_asset_check_evaluations()
    refused = next(
        e
        for e in evaluations
        if e.asset_key == customers.change_log_key and e.check_name == "coverage"
    )
    assert not refused.passed
    assert "column rules changed" in (refused.description or "")
    assert "city: null" in (refused.description or "")
    others = [e.passed for e in evaluations if e.asset_key.path[-1].startswith("purchases")]
    assert others and all(others), "only the table whose rules changed is refused"

    harness.sync()  # the re-snapshot under the new rules, then the range again
    harness.write("INSERT INTO [dbo].[purchases] VALUES (10, N'pii-z@example.com', 1)")
    harness.sync()  # the mirror is rebuilt from the new snapshot
    customers = table(harness, "customers")
    rows = harness.mirror(customers).collect()
    assert len(rows) == len(EMAILS) and {r["city"] for r in rows} == {None}
    assert {r["email"] for r in rows} == {hashed(e) for e in EMAILS.values()}


def test_a_rule_that_stops_fitting_fails_that_table_alone(
    tmp_path: Path,
    spark: SparkSession,
    dagster_home: tuple[Path, DagsterInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new capture instance of customers makes ``phone`` a ``datetime2``, which its redact
    rule refuses: the run fails that table alone, its coverage check saying which rule does
    not fit and what to do, while purchases syncs on."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    _, instance = dagster_home
    db = pii_database(tmp_path)
    harness = build(tmp_path, db, RULES, spark, instance)
    harness.sync()
    conn = emulator.connect(str(db), autocommit=True)
    try:
        conn.execute("ALTER TABLE [dbo].[customers] DROP COLUMN [phone]")
        conn.execute("ALTER TABLE [dbo].[customers] ADD [phone] datetime2 NULL")
        cdc_admin.enable_table(
            conn, "dbo", "customers", capture_instance="dbo_customers_v2", supports_net_changes=True
        )
    finally:
        conn.close()
    harness.capture()
    harness.write("UPDATE [dbo].[customers] SET [city] = N'moved' WHERE [id] = 1")
    harness.write("INSERT INTO [dbo].[purchases] VALUES (7, N'pii-q@example.com', 70)")
    (request,) = harness.tick().run_requests
    result = harness.execute(request)
    assert not result.success
    customers, purchases = table(harness, "customers"), table(harness, "purchases")
    evaluations = result.get_asset_check_evaluations()
    (refused,) = [
        e
        for e in evaluations
        if e.asset_key == customers.change_log_key and e.check_name == "coverage"
    ]
    assert not refused.passed
    text = refused.description or ""
    assert "columns.rules" in text and "'phone'" in text and "redact" in text, text
    assert "Fix the rule" in text, text
    others = [e.passed for e in evaluations if e.asset_key.path[-1].startswith("purchases")]
    assert others and all(others), "only the table the rule no longer fits fails"
    harness.assert_mirrors_equal_source([purchases])


def test_a_rule_changed_on_an_int_column_after_the_first_snapshot(
    tmp_path: Path,
    spark: SparkSession,
    dagster_home: tuple[Path, DagsterInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``hash`` given to the ``int`` column purchases.amount after the table's first snapshot
    (and its history's first versions): the table is re-snapshotted, its change log stores the
    column as text from then on, its mirror holds the hashes, and its history keeps the
    versions before (their amounts as text) with the new ones hashed, saying from which LSN
    the rule holds."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    _, instance = dagster_home
    db = pii_database(tmp_path)
    history = {"include": ["dbo.purchases"]}
    harness = build(tmp_path, db, RULES, spark, instance, history)
    harness.sync()
    harness.write("UPDATE [dbo].[purchases] SET [amount] = 11 WHERE [id] = 1")
    harness.sync()
    hashed_amount = {"tables": "dbo.purchases", "columns": ["amount"], "rule": "hash"}
    harness = build(tmp_path, db, [*RULES, hashed_amount], spark, instance, history)
    harness.write("UPDATE [dbo].[purchases] SET [amount] = 12 WHERE [id] = 2")
    (request,) = harness.tick().run_requests
    # refused (the rules changed): it waits for its re-snapshot, the run does not fail for it
    assert harness.execute(request).success
    harness.sync()  # the re-snapshot under the new rules, then the range again
    harness.write("UPDATE [dbo].[purchases] SET [amount] = 13 WHERE [id] = 3")
    harness.sync()
    purchases = table(harness, "purchases")
    log = harness.source.store.delta_table(purchases.change_log_key.path)
    fields = {f["name"]: f["type"] for f in json.loads(log.schema().to_json())["fields"]}
    assert fields["amount"] == "string"
    conn = emulator.connect(str(db), autocommit=True)
    try:
        amounts = dict(conn.execute("SELECT [id], [amount] FROM [dbo].[purchases]").fetchall())
    finally:
        conn.close()
    mirror = {r["id"]: r["amount"] for r in harness.mirror(purchases).collect()}
    assert mirror == {i: hashed(str(a)) for i, a in amounts.items()}
    snapshot = snapshot_info(harness.source, purchases)
    assert snapshot is not None
    at = snapshot.snapshot_lsn.raw
    versions = harness.source.store.read(spark, purchases.history_key.path, None).collect()
    before = [v for v in versions if v["__start_lsn"] < at]
    after = [v for v in versions if v["__start_lsn"] >= at]
    assert before and {v["amount"] for v in before} >= {"10", "11", "20"}
    assert all(v["__end_lsn"] is not None and v["__end_lsn"] <= at for v in before)
    current = {v["id"]: v["amount"] for v in after if v["__is_current"]}
    assert current == {i: hashed(str(a)) for i, a in amounts.items()}
    properties = harness.source.store.properties(purchases.history_key.path, None) or {}
    assert properties.get("column_rules_from") == snapshot.snapshot_lsn.hex
    shown = harness.instance.get_latest_materialization_event(purchases.history_key)
    assert shown is not None and shown.asset_materialization is not None
    metadata = shown.asset_materialization.metadata
    assert metadata["column_rules_from_lsn"].value == snapshot.snapshot_lsn.hex


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            [{"tables": "dbo.customers", "columns": ["emial"], "rule": "hash"}],
            "names column 'emial', which no table it matches (dbo.customers) captures",
        ),
        (
            [
                {"tables": "dbo.customers", "columns": ["email"], "rule": "exclude"},
                {"tables": "dbo.*", "columns": ["email"], "rule": "hash"},
            ],
            "column dbo.customers.email has two rules (exclude and hash)",
        ),
        (
            [{"tables": "dbo.customers", "columns": ["id"], "rule": "exclude"}],
            "'id' is a key column of dbo_customers: it cannot be excluded",
        ),
        (
            [{"tables": "sales.*", "columns": ["email"], "rule": "null"}],
            "the null rule for tables sales.* matches no selected table",
        ),
    ],
)
def test_rules_that_do_not_fit_the_tables_stop_the_definitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rules: list[dict[str, Any]], message: str
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    db = pii_database(tmp_path)
    config = make_config(tmp_path, db, rules)
    with pytest.raises(ConfigError) as raised:
        load_source(config.sources[0], config.storage.base_path)
    text = str(raised.value)
    assert text.startswith(f"source {SOURCE!r}: columns.rules: ") and message in text, text
    assert "\n" not in text
    assert not (tmp_path / "storage").exists()  # nothing written


def test_bad_settings_fail_at_config_load_without_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "source.db"
    hash_rule = [{"tables": "dbo.customers", "columns": ["email"], "rule": "hash"}]
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(ConfigError, match=f"the environment variable {KEY_ENV} .* is not set"):
        make_config(tmp_path, db, hash_rule)

    monkeypatch.setenv(KEY_ENV, SECRET)
    bad_rule = [{"tables": "dbo.customers", "columns": ["email"], "rule": "scramble"}]
    with pytest.raises(ConfigError, match=r"columns\.rules\.0\.rule") as raised:
        make_config(tmp_path, db, bad_rule)
    assert SECRET not in str(raised.value)
    twice = [{"tables": "dbo.customers", "columns": ["email", "EMAIL"], "rule": "null"}]
    with pytest.raises(ConfigError, match="given twice in one rule"):
        make_config(tmp_path, db, twice)
    without_env = {
        "sources": [
            {
                "name": SOURCE,
                "connection": {"emulator": {"path": str(db)}},
                "columns": {"rules": hash_rule},
            }
        ],
        "storage": {"base_path": str(tmp_path / "storage")},
    }
    with pytest.raises(ConfigError, match="a hash rule needs hash_key_env"):
        parse_config(without_env, base_dir=tmp_path, origin="test config")
