"""The code location (``workspace.yaml``, ``dg``'s ``code_location_target_module``).

It loads the package's ``defs/`` folder — this repository is a ``dg`` project, its demo source a
``cdc_assets.SqlServerCdcSource`` component under ``cdc_assets/defs/demo`` — or, for a project
configured the earlier way, the ``cdc_assets.yaml`` that ``$CDC_ASSETS_CONFIG`` names (or that
lies in the working directory) instead (:mod:`cdc_assets.dagster.code_location`).

A bad config or a source that has never answered stops the code location with one line that
says what is wrong and what to do (``cdc-assets check`` prints the same line for a file); a
source that does not answer now loads from its recorded catalog.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from cdc_assets.dagster.code_location import CodeLocationError, configured_file, load_definitions


@dg.definitions
def defs() -> dg.Definitions:
    if configured_file() is None:
        return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
    failure = ""
    try:
        definitions, _sources, _components = load_definitions()
    except CodeLocationError as exc:
        failure = str(exc)
    if failure:  # raised here, outside the except block: the UI shows this one line and frame
        raise CodeLocationError(failure)
    return definitions
