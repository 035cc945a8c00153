"""The address in a Spark Connect URL (``sc://host[:port][/;params]``), without Spark.

One parser for the config's validation, the Spark Connect server launcher and the demo's process
supervisor (which must stay light: it imports neither Spark nor the config's dependencies).
"""

from __future__ import annotations

import re

SPARK_CONNECT_PORT = 15002  # Spark Connect's own default
_URL = re.compile(r"^sc://([^\s/:]+)(?::(\d+))?(/.*)?$")


def spark_connect_address(url: str | None) -> tuple[str, int] | None:
    """(host, port) of a Spark Connect URL; None for anything that is not one."""
    match = _URL.match(url or "")
    if match is None:
        return None
    return match.group(1), int(match.group(2) or SPARK_CONNECT_PORT)
