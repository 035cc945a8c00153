"""A script's control flow, as SQL Server runs it: ``WHILE`` (``BREAK``, ``CONTINUE``),
``BEGIN TRY ... END TRY BEGIN CATCH ... END CATCH``, ``THROW``, ``RAISERROR``, ``PRINT``,
``RETURN``, ``WAITFOR DELAY``, and what a CATCH block reads (``ERROR_NUMBER()``,
``ERROR_MESSAGE()``, ``ERROR_SEVERITY()``, ``ERROR_STATE()``, ``ERROR_LINE()``,
``ERROR_PROCEDURE()``, ``@@ERROR``).

- ``PRINT`` and a ``RAISERROR`` of severity 10 or less are informational messages, not errors:
  they reach the client with the statement's results (:class:`Message`; over TDS an INFO token,
  through the DB-API in ``cursor.messages`` as pyodbc has them) and the batch goes on.
- A ``RAISERROR`` of severity 11 or more and ``THROW`` are errors (``THROW``: severity 16,
  number 50000 or above; ``RAISERROR`` with a message text: number 50000). Inside TRY they pass
  control to the CATCH block, as any error of a statement does; outside, they end the batch.
- What a CATCH block cannot catch in SQL Server is not caught here either: errors of compiling
  a statement (syntax 102 / 156, invalid object 208 or column 207: SQL Server resolves names when
  it compiles the statement) and what the emulator does not support (which must never pass as
  a handled error).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import errors
from ..batches.batch_statement import Statement
from ..batches.control_statements import raiserror_text
from ..translate.plan import Result

NOT_CAUGHT = frozenset({102, 156, 207, 208})
INFO_STATE = "01000"


@dataclass(frozen=True)
class Message:
    """An informational message (PRINT, RAISERROR of severity 10 or less)."""

    number: int
    severity: int
    state: int
    text: str

    def as_pyodbc(self) -> tuple[str, str]:
        """The entry pyodbc puts in ``cursor.messages`` for it."""
        return (f"[{INFO_STATE}] ({self.number})", f"{errors.DRIVER}{self.text}")


class Break(Exception):
    """BREAK: the innermost WHILE ends."""


class Continue(Exception):
    """CONTINUE: the innermost WHILE starts its next round."""


class Return(Exception):
    """RETURN: the batch ends here."""


class ControlFlow:
    """The part of :class:`.session.Session` that runs loops, TRY / CATCH and messages."""

    messages: list[Message]
    caught: list[errors.Error]
    last_error: int
    rowcount: int

    def run(self, statement: Statement, params: Sequence[Any]) -> None: ...

    def evaluate(self, statement: Statement, params: Sequence[Any]) -> Result | None: ...

    def values(self, statement: Statement, params: Sequence[Any]) -> tuple[Any, ...]:
        """The one row of a SELECT of expressions (IF and WHILE tests, PRINT, THROW ...)."""
        result = self.evaluate(statement, params)
        assert result is not None and result.rows is not None
        return tuple(next(iter(result.rows)))

    def control_flow(self, control: tuple[Any, ...], params: Sequence[Any]) -> None:
        kind = control[0]
        if kind == "while":
            _, test, body = control
            while self.values(test, params)[0] == 1:
                try:
                    self.run(body, params)
                except Break:
                    break
                except Continue:
                    continue
        elif kind == "try":
            self._try(control[1], control[2], params)
        elif kind == "break":
            raise Break
        elif kind == "continue":
            raise Continue
        elif kind == "return":
            raise Return
        elif kind == "print":
            (value,) = self.values(control[1], params)
            self.messages.append(Message(0, 0, 1, "" if value is None else _text(value)))
            self.rowcount = 0
        elif kind == "throw":
            self._throw(control[1], params)
        elif kind == "raiserror":
            self._raiserror(control[1], control[2], params)
        elif kind == "waitfor":
            (delay,) = self.values(control[1], params)
            time.sleep(_seconds(delay))
        else:
            raise errors.server_error(0, f"unknown control statement {kind}")

    def _try(self, body: Statement, handler: Statement, params: Sequence[Any]) -> None:
        try:
            self.run(body, params)
        except errors.Error as exc:
            if isinstance(exc, errors.NotSupportedError) or exc.number in NOT_CAUGHT:
                raise
            self.caught.append(exc)
            try:
                self.last_error = errors.number_state_severity(exc)[0]
                self.run(handler, params)
            finally:
                self.caught.pop()

    def _throw(self, values: Statement | None, params: Sequence[Any]) -> None:
        if values is None:
            if not self.caught:
                raise errors.server_error(
                    10704,
                    "To rethrow an error, a THROW statement must be used inside a CATCH block.",
                )
            raise self.caught[-1]
        row = self.values(values, params)
        if len(row) != 3:
            raise errors.server_error(102, "Incorrect syntax near 'THROW'.")
        number, text, state = row
        if not isinstance(number, int) or number < 50000:
            raise errors.server_error(
                35100,
                f"Error number {number} in the THROW statement is outside the valid range. "
                "Specify an error number in the valid range of 50000 to 2147483647.",
            )
        raise errors.user_error(number, _text(text), 16, _state(state))

    def _raiserror(
        self, values: Statement, options: tuple[str, ...], params: Sequence[Any]
    ) -> None:
        row = self.values(values, params)
        if len(row) < 3:
            raise errors.server_error(102, "Incorrect syntax near 'RAISERROR'.")
        message, severity, state, *arguments = row
        if not isinstance(message, str):
            raise errors.not_supported("RAISERROR with a message number (sys.messages)")
        severity = max(0, min(int(severity), 25))
        text = raiserror_text(message, arguments)
        if severity <= 10:
            self.messages.append(Message(50000, severity, _state(state), text))
            self.last_error = 50000 if "SETERROR" in options else 0
            self.rowcount = 0
            return
        raise errors.user_error(50000, text, severity, _state(state))

    def error_info(self, field: str) -> Any:
        """What ``ERROR_<field>()`` returns: of the error the innermost CATCH block handles,
        NULL outside one."""
        if not self.caught:
            return None
        exc = self.caught[-1]
        number, state, severity = errors.number_state_severity(exc)
        return {
            "NUMBER": number,
            "SEVERITY": severity,
            "STATE": state,
            "MESSAGE": errors.error_text(exc),
            "LINE": 1,
            "PROCEDURE": None,
        }[field]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _state(value: Any) -> int:
    state = int(value) if value is not None else 1
    if not 0 <= state <= 255:
        raise errors.arithmetic_overflow("tinyint")
    return state


def _seconds(delay: Any) -> float:
    """``WAITFOR DELAY``'s ``hh:mm:ss[.mmm]`` (or a time) in seconds."""
    if isinstance(delay, dt.time):
        return delay.hour * 3600 + delay.minute * 60 + delay.second + delay.microsecond / 1e6
    try:
        parts = [float(p) for p in str(delay).split(":")]
    except ValueError:
        raise errors.server_error(148, f"Incorrect time syntax in time string '{delay}'.") from None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return seconds
