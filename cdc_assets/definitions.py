"""The code location: Definitions built from ``cdc_assets.yaml`` (or ``$CDC_ASSETS_CONFIG``).

``workspace.yaml`` names this module. A bad config or an unreachable source stops the code
location with one message that says what is wrong and what to do.
"""

from __future__ import annotations

import dagster as dg

from cdc_assets.config import load_config
from cdc_assets.dagster.definitions_builder import build_definitions


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
