"""Statements about principals and permissions, as the control tuples the session runs
(:mod:`..session.security`): ``CREATE LOGIN name WITH ...``, ``ALTER LOGIN name ...``, ``CREATE
USER name [FOR | FROM LOGIN login | WITHOUT LOGIN]``, ``ALTER ROLE role ADD | DROP MEMBER name``,
and ``GRANT`` / ``DENY`` / ``REVOKE`` (accepted and kept nowhere: the emulator enforces no
permission). sqlglot parses few of them; they are recognised here from their tokens.
"""

from __future__ import annotations

from sqlglot.tokens import Token, TokenType

from .. import errors
from .batch_statement import Statement, token_word

PERMISSION_WORDS = ("GRANT", "DENY", "REVOKE")


def _name(tokens: list[Token], at: int, after: str) -> str:
    if at >= len(tokens) or tokens[at].token_type not in (TokenType.IDENTIFIER, TokenType.VAR):
        raise errors.server_error(102, f"Incorrect syntax near '{after}'.")
    return tokens[at].text


def security_statement(tokens: list[Token]) -> Statement | None:
    """The control tuple of a principal or permission statement, None for any other."""
    words = [token_word(t) for t in tokens]
    first, second = words[0], words[1] if len(words) > 1 else ""
    if first in PERMISSION_WORDS:
        return Statement(text="", control=("permission", first), param_count=0)
    if first in ("CREATE", "ALTER", "DROP") and second in ("LOGIN", "USER"):
        name = _name(tokens, 2, second)
        login = None
        if first == "CREATE" and second == "USER":
            for i in range(3, len(words) - 2):
                if words[i] in ("FOR", "FROM") and words[i + 1] == "LOGIN":
                    login = _name(tokens, i + 2, "LOGIN")
            login = login if login is not None or "WITHOUT" in words else name
        return Statement(
            text="",
            control=("principal", first.lower(), second.lower(), name, login),
            param_count=0,
        )
    if first == "ALTER" and second == "ROLE":
        role = _name(tokens, 2, "ROLE")
        if len(words) < 6 or words[3] not in ("ADD", "DROP") or words[4] != "MEMBER":
            raise errors.not_supported("ALTER ROLE other than ADD MEMBER / DROP MEMBER")
        member = _name(tokens, 5, "MEMBER")
        return Statement(
            text="", control=("membership", words[3].lower(), role, member), param_count=0
        )
    return None
