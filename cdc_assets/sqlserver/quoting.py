"""Identifier quoting with SQL Server's ``QUOTENAME`` rules (DESIGN.md section 8).

Names from the catalog (schemas, tables, columns, capture instances) reach T-SQL text only
through :func:`quote_name`: ``[`` + name with every ``]`` doubled + ``]``. Like ``QUOTENAME`` it
refuses names longer than 128 characters (``sysname``); it also refuses empty names and control
characters, which no catalog name holds. Values are never quoted here: they are ``?`` parameters.

https://learn.microsoft.com/en-us/sql/t-sql/functions/quotename-transact-sql
https://learn.microsoft.com/en-us/sql/relational-databases/databases/database-identifiers
"""

from __future__ import annotations

import unicodedata

__all__ = [
    "MAX_IDENTIFIER_LENGTH",
    "InvalidIdentifier",
    "change_table",
    "query_function",
    "quote_name",
    "quote_table",
    "validate_identifier",
]

MAX_IDENTIFIER_LENGTH = 128


class InvalidIdentifier(ValueError):
    """A name that cannot be a SQL Server identifier; the message says why."""


def validate_identifier(name: str) -> str:
    """Return ``name`` if it can be a (delimited) SQL Server identifier, else raise."""
    if not isinstance(name, str):
        raise InvalidIdentifier(f"an identifier is a string; got {type(name).__name__}")
    if not name:
        raise InvalidIdentifier("an identifier cannot be empty")
    if len(name) > MAX_IDENTIFIER_LENGTH:
        raise InvalidIdentifier(
            f"an identifier has at most {MAX_IDENTIFIER_LENGTH} characters (sysname); "
            f"got {len(name)}: {name[:20]!r}..."
        )
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        raise InvalidIdentifier(f"an identifier cannot contain control characters: {name!r}")
    return name


def quote_name(name: str) -> str:
    """``QUOTENAME(name)``: ``[`` + name with ``]`` doubled + ``]``."""
    return "[" + validate_identifier(name).replace("]", "]]") + "]"


def quote_table(schema: str, table: str) -> str:
    """``[schema].[table]``."""
    return f"{quote_name(schema)}.{quote_name(table)}"


def change_table(capture_instance: str) -> str:
    """The change table of a capture instance: ``[cdc].[<capture_instance>_CT]``."""
    return quote_table("cdc", validate_identifier(capture_instance) + "_CT")


def query_function(kind: str, capture_instance: str) -> str:
    """``[cdc].[fn_cdc_get_<kind>_changes_<capture_instance>]`` (kind ``all`` or ``net``)."""
    if kind not in ("all", "net"):
        raise ValueError(f"kind is 'all' or 'net'; got {kind!r}")
    return quote_table("cdc", f"fn_cdc_get_{kind}_changes_{validate_identifier(capture_instance)}")
