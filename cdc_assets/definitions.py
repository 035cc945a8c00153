"""The code location: Definitions built from ``cdc_assets.yaml`` (or ``$CDC_ASSETS_CONFIG``).

``workspace.yaml`` names this module. A bad config or an unreachable source stops the code
location with one line that says what is wrong and what to do (``cdc-assets check`` prints the
same line without starting Dagster).
"""

from __future__ import annotations

import dagster as dg

from cdc_assets.dagster.code_location import CodeLocationError, load_definitions


@dg.definitions
def defs() -> dg.Definitions:
    failure = ""
    try:
        definitions, _sources = load_definitions()
    except CodeLocationError as exc:
        failure = str(exc)
    if failure:  # raised here, outside the except block: the UI shows this one line and frame
        raise CodeLocationError(failure)
    return definitions
