"""A T-SQL script as ``sqlcmd -i`` reads it: batches separated by ``GO`` lines, sqlcmd's
scripting variables ``$(NAME)`` (``:setvar NAME value``, ``-v NAME=value``, or the environment,
as sqlcmd reads them), and its ``:on error exit|ignore`` command. :func:`run_script` sends each
batch to a DB-API connection (the emulator's own, or any driver's) and reports what each returned.

``GO [count]`` (alone on its line, any case) ends a batch and runs it ``count`` times. Other
sqlcmd commands (``:r``, ``:connect``, ``!!``) are refused with a clear error; a ``GO`` inside a
string or a comment that spans lines is not recognised (sqlcmd does the same).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_GO = re.compile(r"^\s*GO(?:\s+(\d+))?\s*(?:--.*)?$", re.IGNORECASE)
_COMMAND = re.compile(r"^\s*:(\w+)\s*(.*?)\s*$")
_VARIABLE = re.compile(r"\$\((\w+)\)")


class ScriptError(Exception):
    """The script cannot be read as sqlcmd would (an unknown command or variable)."""


@dataclass(frozen=True)
class Batch:
    """One batch of a script: its text (variables substituted), first line, repetitions."""

    text: str
    line: int
    count: int = 1


@dataclass
class Script:
    """The batches of a script and its ``:on error`` choice (``exit`` stops at a failure)."""

    batches: list[Batch] = field(default_factory=list)
    on_error: str = "exit"


def parse_script(
    text: str,
    variables: Mapping[str, str] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
) -> Script:
    """``text`` cut into batches at its ``GO`` lines, ``$(NAME)`` replaced (``variables`` first,
    then ``:setvar``, then the environment: sqlcmd's order is -v, :setvar, environment)."""
    given = {k.upper(): v for k, v in (variables or {}).items()}
    defined: dict[str, str] = {}
    script = Script()
    lines: list[str] = []
    start = 1

    def value(match: re.Match[str]) -> str:
        name = match.group(1).upper()
        for source in (given, defined):
            if name in source:
                return source[name]
        for key, found in environ.items():
            if key.upper() == name:
                return found
        raise ScriptError(f"'{match.group(1)}' scripting variable not defined.")

    def finish(count: int) -> None:
        body = "\n".join(lines)
        if body.strip():
            script.batches.append(Batch(_VARIABLE.sub(value, body), start, count))
        lines.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        go = _GO.match(line)
        command = _COMMAND.match(line)
        if go is not None:
            finish(int(go.group(1) or 1))
            start = number + 1
        elif command is not None and not lines_open_a_string(lines):
            name, argument = command.group(1).lower(), command.group(2)
            if name == "on" and argument.lower() in ("error exit", "error ignore"):
                script.on_error = argument.lower().split()[1]
            elif name == "setvar":
                parts = argument.split(None, 1)
                if not parts:
                    raise ScriptError(f"line {number}: :setvar needs a name")
                defined[parts[0].upper()] = parts[1].strip('"') if len(parts) > 1 else ""
            else:
                raise ScriptError(f"line {number}: sqlcmd command ':{name}' is not supported")
            lines.append("")  # keep line numbers
        else:
            lines.append(line)
    finish(1)
    return script


def lines_open_a_string(lines: list[str]) -> bool:
    """Whether the text so far leaves a string literal open (an odd number of quotes)."""
    return sum(line.count("'") for line in lines) % 2 == 1


@dataclass(frozen=True)
class Outcome:
    """What one run of a batch returned: result sets (column names, rows), row counts,
    informational messages, and the error that stopped it (None when it succeeded)."""

    batch: Batch
    results: list[tuple[list[str], list[tuple[Any, ...]]]]
    counts: list[int]
    messages: list[str]
    error: BaseException | None = None


def run_script(
    connection: Any, script: Script, errors: tuple[type[BaseException], ...]
) -> Iterator[Outcome]:
    """Run each batch of ``script`` on ``connection`` (autocommit on, as sqlcmd's); one
    :class:`Outcome` per run. With ``:on error exit`` (the default here, as ``sqlcmd -b``) the
    first failing batch is the last one run."""
    for batch in script.batches:
        for _ in range(batch.count):
            outcome = _run_batch(connection, batch, errors)
            yield outcome
            if outcome.error is not None and script.on_error == "exit":
                return


def _run_batch(connection: Any, batch: Batch, errors: tuple[type[BaseException], ...]) -> Outcome:
    results: list[tuple[list[str], list[tuple[Any, ...]]]] = []
    counts: list[int] = []
    messages: list[str] = []
    collect: Callable[[Any], None] = lambda cursor: messages.extend(  # noqa: E731
        str(m[1]).rsplit("]", 1)[-1] for m in getattr(cursor, "messages", ())
    )
    try:
        cursor = connection.cursor()
        cursor.execute(batch.text)
        while True:
            collect(cursor)
            if cursor.description is not None:
                names = [d[0] for d in cursor.description]
                results.append((names, [tuple(r) for r in cursor.fetchall()]))
            elif cursor.rowcount >= 0:
                counts.append(cursor.rowcount)
            if not cursor.nextset():
                break
        cursor.close()
    except errors as exc:
        return Outcome(batch, results, counts, messages, exc)
    return Outcome(batch, results, counts, messages)
