"""One line per problem in a configuration: where it is (a source by its name), what is wrong,
the setting meant when one is misspelt, and the value given unless the setting may hold a secret.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from pydantic import BaseModel

# Settings whose values are never repeated in an error message (they may hold a password).
_SECRET_PARTS = ("password", "connection_string", "secret", "pwd")


def _fields_at(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The setting names of the model at ``path`` (list indexes skipped); [] if unknown."""
    current: Any = model
    for part in path:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return []
        current = _model_of(fields[part].annotation)
    return list(getattr(current, "model_fields", {}))


def _model_of(annotation: Any) -> Any:
    """The pydantic model inside ``X | None`` or ``tuple[X, ...]``, else ``annotation``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _where(loc: Sequence[str | int], data: Any) -> str:
    """``source 'shop': sync.sensor_interval_seconds`` (a source by its name, not its index)."""
    parts = list(loc)
    prefix = ""
    if len(parts) >= 2 and parts[0] == "sources" and isinstance(parts[1], int):
        index = parts[1]
        sources = data.get("sources") if isinstance(data, dict) else None
        entry = sources[index] if isinstance(sources, list) and index < len(sources) else None
        name = entry.get("name") if isinstance(entry, dict) else None
        prefix = f"source {name!r}" if isinstance(name, str) and name else f"source {index + 1}"
        parts = parts[2:]
        if not parts:
            return prefix
        prefix += ": "
    return prefix + (".".join(str(p) for p in parts) or "(top level)")


def describe(
    error: Mapping[str, Any],
    data: Any,
    *,
    root: type[BaseModel],
    source: str | None = None,
) -> str:
    """One problem in one clause; ``root`` is the model validated (the project's or a source's),
    ``source`` names the source when ``root`` is one source's (a component's attributes)."""
    loc: Sequence[str | int] = error["loc"]
    if source is None:
        where = _where(loc, data)
    else:
        dotted = ".".join(str(p) for p in loc)
        where = f"source {source!r}: {dotted}" if dotted else f"source {source!r}"
    if error["type"] == "extra_forbidden":
        known = _fields_at(root, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        return f"{where}: unknown setting; {hint}" if known else f"{where}: unknown setting"
    message = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    secret = any(s in str(p).lower() for p in loc for s in _SECRET_PARTS)
    if not secret and isinstance(value, str | int | float | bool) and not isinstance(value, dict):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        message = f"{message} (got {shown})"
    return f"{where}: {message}"
