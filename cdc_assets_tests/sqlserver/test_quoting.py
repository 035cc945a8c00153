"""QUOTENAME rules for identifiers that reach T-SQL text."""

from __future__ import annotations

import pytest

from cdc_assets.sqlserver.quoting import (
    InvalidIdentifier,
    change_table,
    query_function,
    quote_name,
    quote_table,
    validate_identifier,
)


@pytest.mark.parametrize(
    ("name", "quoted"),
    [
        ("orders", "[orders]"),
        ("order items", "[order items]"),
        ("a]b", "[a]]b]"),
        ("]]", "[]]]]]"),
        ("[x]", "[[x]]]"),
        ("it's", "[it's]"),
        ('say "hi"', '[say "hi"]'),
        ("Bestellungen_Größe", "[Bestellungen_Größe]"),
        ("注文", "[注文]"),
        ("emoji😀", "[emoji😀]"),
        (" leading", "[ leading]"),
        ("semi;colon--", "[semi;colon--]"),
        ("x" * 128, "[" + "x" * 128 + "]"),
    ],
)
def test_quote_name(name: str, quoted: str) -> None:
    assert quote_name(name) == quoted


@pytest.mark.parametrize("name", ["", "x" * 129, "tab\there", "nul\x00", "new\nline"])
def test_invalid_identifiers_are_refused(name: str) -> None:
    with pytest.raises(InvalidIdentifier):
        quote_name(name)


def test_non_string_is_refused() -> None:
    with pytest.raises(InvalidIdentifier, match="string"):
        validate_identifier(42)  # type: ignore[arg-type]


def test_qualified_names() -> None:
    assert quote_table("dbo", "orders") == "[dbo].[orders]"
    assert quote_table("sales]x", "a b") == "[sales]]x].[a b]"
    assert change_table("dbo_orders") == "[cdc].[dbo_orders_CT]"
    assert change_table("x]y") == "[cdc].[x]]y_CT]"
    assert query_function("all", "dbo_orders") == "[cdc].[fn_cdc_get_all_changes_dbo_orders]"
    assert query_function("net", "dbo_orders") == "[cdc].[fn_cdc_get_net_changes_dbo_orders]"
    with pytest.raises(ValueError):
        query_function("some", "dbo_orders")
