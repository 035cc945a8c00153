"""A TDS 7.4 server in front of the emulator, so real SQL Server clients (pyodbc with Microsoft
ODBC Driver 18 or FreeTDS, python-tds, sqlcmd) can use an emulator database.

It sits on the emulator's public DB-API only (``cdc_assets.emulator.connect``). No Dagster, no
Spark. Modules: :mod:`.wire` (packets, tokens), :mod:`.login` (PRELOGIN, TLS, LOGIN7),
:mod:`.requests` (batches, RPC, transaction manager), :mod:`.datatypes` (types on the wire),
:mod:`.client` (one connection), :mod:`.server` (listener and threads).
"""

from .login import LoginAttempt
from .server import DEFAULT_USER, TdsServer, self_signed_context

__all__ = ["DEFAULT_USER", "LoginAttempt", "TdsServer", "self_signed_context"]
