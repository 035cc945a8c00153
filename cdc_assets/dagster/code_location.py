"""Loading the code location: the config file, its sources discovered, the definitions built.

A problem a person can fix (a bad config file, a source that is missing or unreachable) becomes
one :class:`CodeLocationError` whose message is a single line naming the file or the source and
saying what to do; the code location (``cdc_assets.definitions``) and ``cdc-assets check`` show
the same text. Loading never writes anything: a missing emulated source is an error, not a new
empty database.
"""

from __future__ import annotations

from pathlib import Path

from dagster import Definitions

from cdc_assets.config import ConfigError, config_path, load_config
from cdc_assets.sqlserver.errors import SqlServerError

from .definitions_builder import build_definitions
from .source import Source, load_source


class CodeLocationError(Exception):
    """The code location cannot load; the message is one line that says what to do."""


def load_definitions(path: str | Path | None = None) -> tuple[Definitions, list[Source]]:
    """The definitions of the config file at ``path`` (default: ``$CDC_ASSETS_CONFIG`` or
    ``./cdc_assets.yaml``) and its discovered sources; :class:`CodeLocationError` if unusable."""
    failure = ""
    try:
        config = load_config(path)
    except ConfigError as exc:
        failure = str(exc)
    if failure:  # raised outside the except block: nothing chained, one line shown
        raise CodeLocationError(failure)
    sources: list[Source] = []
    for source in config.sources:
        try:
            sources.append(load_source(source, config.storage.base_path))
        except (ConfigError, SqlServerError) as exc:
            text = str(exc)
            prefix = f"source {source.name!r}: "
            failure = f"{config_path(path)}: {text if text.startswith(prefix) else prefix + text}"
        if failure:
            raise CodeLocationError(failure)
    return build_definitions(config, sources), sources
