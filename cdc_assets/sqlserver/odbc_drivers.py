"""Where the ODBC drivers are: Microsoft ODBC Driver 18 from the PyPI wheel ``mssql-python-odbc``.

The wheel carries the driver's shared library for each Linux family; pyodbc loads it by absolute
path (``driver: /abs/path/libmsodbcsql-18.6.so.2.1`` in an ``odbc:`` connection), no odbcinst.ini
entry needed. It needs the system's libltdl and Kerberos/GSSAPI libraries (scripts/setup.sh).
https://pypi.org/project/mssql-python-odbc/
"""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path

__all__ = ["msodbcsql18_path"]

_FAMILY = "debian_ubuntu"
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}


def msodbcsql18_path() -> Path | None:
    """The Debian/Ubuntu build of ODBC Driver 18 in the installed wheel, or None without it."""
    spec = importlib.util.find_spec("mssql_python_odbc")
    if spec is None or not spec.submodule_search_locations:
        return None
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    for location in spec.submodule_search_locations:
        lib = Path(location) / "libs" / "linux" / _FAMILY / arch / "lib"
        found = sorted(lib.glob("libmsodbcsql-18*.so*"))
        if found:
            return found[-1]
    return None
