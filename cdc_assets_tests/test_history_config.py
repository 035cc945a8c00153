"""The ``history`` settings of a source: which tables keep a history, which columns version."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_assets.config import ConfigError, parse_config
from cdc_assets.history_config import HistoryConfig


def _config(tmp_path: Path, history: dict) -> object:
    return parse_config(
        {
            "sources": [
                {"name": "shop", "connection": {"emulator": {"path": "s.db"}}, "history": history}
            ],
            "storage": {"base_path": "storage"},
        },
        base_dir=tmp_path,
        origin="test config",
    )


def test_patterns_choose_the_tables_and_their_tracked_columns() -> None:
    settings = HistoryConfig(
        include=("dbo.*",),
        exclude=("dbo.audit_*",),
        track_history_columns={"dbo.customers": ("email", "tier")},
    )
    assert settings.enabled("dbo", "Customers")  # case-insensitive, as table patterns are
    assert not settings.enabled("dbo", "audit_log")
    assert not settings.enabled("sales", "orders")
    assert settings.tracked_columns("dbo", "customers") == ("email", "tier")
    assert settings.tracked_columns("dbo", "orders") is None
    assert not HistoryConfig().enabled("dbo", "orders")  # none by default


def test_a_source_config_takes_history_settings(tmp_path: Path) -> None:
    config = _config(tmp_path, {"include": ["*"]})
    assert config.sources[0].history.enabled("dbo", "orders")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("history", "said"),
    [
        ({"track_history_columns": {"dbo.customers": []}}, "lists no column"),
        ({"include": ["*"], "tracked": ["x"]}, "history.tracked"),
    ],
)
def test_bad_history_settings_give_one_line(tmp_path: Path, history: dict, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, history)
    message = str(caught.value)
    assert said in message and "\n" not in message, message
