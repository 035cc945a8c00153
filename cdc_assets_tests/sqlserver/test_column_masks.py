"""Column rules applied where the rows are read: the snapshot and change reads of a masked
capture instance return hashed, redacted and null values, never an excluded column."""

from __future__ import annotations

import hashlib
import hmac
import pickle
from typing import Any

import pyarrow as pa
import pytest

from cdc_assets.lsn import LsnRange
from cdc_assets.sqlserver.catalog import CaptureInstance, discover
from cdc_assets.sqlserver.changes import change_rows_query, read_changes
from cdc_assets.sqlserver.chunks import plan_key_ranges
from cdc_assets.sqlserver.column_masks import (
    HashKey,
    MaskError,
    mask_instance,
    rules_fingerprint,
)
from cdc_assets.sqlserver.lsn_queries import get_max_lsn, get_min_lsn
from cdc_assets.sqlserver.snapshot import KeyRange, read_rows, rows_query

from .conftest import CdcDatabase

PEOPLE_DDL = (
    "CREATE TABLE [dbo].[people] ([id] int NOT NULL, [email] nvarchar(100) NULL, "
    "[ssn] varchar(20) NULL, [phone] nvarchar(30) NULL, [card] bigint NULL, "
    "[born] date NULL, CONSTRAINT [pk_people] PRIMARY KEY ([id]))"
)
KEY = HashKey(b"test-key-not-a-secret")
RULES = {"email": "hash", "ssn": "exclude", "phone": "redact", "card": "null"}


def expected_hash(value: str) -> str:
    return hmac.new(b"test-key-not-a-secret", value.encode(), hashlib.sha256).hexdigest()


@pytest.fixture
def people(make_cdc_db: Any) -> CdcDatabase:
    db: CdcDatabase = make_cdc_db(PEOPLE_DDL)
    db.execute(
        "INSERT INTO [dbo].[people] VALUES (1, N'pii-alice@example.com', '123-45-6789', "
        "N'555-0100', 4111111111111111, '1980-01-02'), (2, NULL, NULL, NULL, NULL, NULL)"
    )
    db.scan()
    return db


def raw_instance(db: CdcDatabase) -> CaptureInstance:
    instance = discover(db.conn)[("dbo", "people")].current_instance
    assert instance is not None
    return instance


def rows(batches: Any) -> list[dict[str, Any]]:
    return pa.Table.from_batches(list(batches)).to_pylist()


def test_snapshot_and_changes_read_masked_values(people: CdcDatabase) -> None:
    instance = mask_instance(raw_instance(people), RULES, KEY)
    assert instance.column_names == ("id", "email", "phone", "card", "born")
    assert instance.excluded_columns == ("ssn",)
    sql, _ = rows_query(instance, None)
    assert "[ssn]" not in sql and "N'****' AS [phone]" in sql and "NULL AS [card]" in sql

    snapshot = rows(read_rows(people.conn, instance))
    assert snapshot[0] == {
        "id": 1,
        "email": expected_hash("pii-alice@example.com"),
        "phone": "****",
        "card": None,
        "born": snapshot[0]["born"],
    }
    assert snapshot[1]["email"] is None and snapshot[1]["phone"] == "****"

    assert "[ssn]" not in change_rows_query(instance)
    start = get_min_lsn(people.conn, instance.name).decrement()
    changes = rows(read_changes(people.conn, instance, LsnRange(start, get_max_lsn(people.conn))))
    assert [r["email"] for r in changes] == [expected_hash("pii-alice@example.com"), None]
    assert {r["phone"] for r in changes} == {"****"} and {r["card"] for r in changes} == {None}
    assert all("ssn" not in r for r in changes)


def test_bad_rules_are_refused_with_one_line(people: CdcDatabase) -> None:
    instance = raw_instance(people)
    with pytest.raises(MaskError, match=r"'id' is a key column .* cannot be excluded"):
        mask_instance(instance, {"id": "exclude"}, KEY)
    with pytest.raises(MaskError, match=r"'born' \(date\): redact has no fixed value"):
        mask_instance(instance, {"born": "redact"}, KEY)
    with pytest.raises(MaskError, match=r"'id' is a key column .* masked with null"):
        mask_instance(instance, {"id": "null"}, KEY)
    with pytest.raises(MaskError, match=r"hash needs columns\.hash_key_env"):
        mask_instance(instance, {"email": "hash"}, None)


def test_the_key_is_never_shown_and_travels_pickled() -> None:
    key = HashKey(b"s3cr3t-value")
    assert "s3cr3t" not in repr(key) and "s3cr3t" not in str(key)
    again = pickle.loads(pickle.dumps(key))
    assert again.digest_hex(b"x") == key.digest_hex(b"x")
    assert key.digest_hex(b"x") == hmac.new(b"s3cr3t-value", b"x", hashlib.sha256).hexdigest()
    long_key = HashKey(b"k" * 100)  # longer than SHA-256's block: hashed first, as HMAC says
    assert long_key.digest_hex(b"x") == hmac.new(b"k" * 100, b"x", hashlib.sha256).hexdigest()


def test_fingerprint_follows_rules_and_key(people: CdcDatabase) -> None:
    instance = raw_instance(people)
    assert rules_fingerprint(instance) == ""
    hashed = rules_fingerprint(mask_instance(instance, {"email": "hash"}, KEY))
    other_key = rules_fingerprint(mask_instance(instance, {"email": "hash"}, HashKey(b"other")))
    nulled = rules_fingerprint(mask_instance(instance, {"email": "null"}, KEY))
    assert len({hashed, other_key, nulled, ""}) == 4
    assert "test-key" not in hashed


def test_a_hashed_key_is_not_cut_into_key_ranges(people: CdcDatabase) -> None:
    """Chunk bounds are raw key values recorded with each commit: never for a hashed key."""
    instance = raw_instance(people)
    assert len(plan_key_ranges(people.conn, instance, 1)) == 2
    hashed = mask_instance(instance, {"id": "hash"}, KEY)
    assert plan_key_ranges(people.conn, hashed, 1) == [KeyRange()]
    ids = [r["id"] for r in rows(read_rows(people.conn, hashed))]
    assert sorted(ids) == sorted(expected_hash(str(i)) for i in (1, 2))
