"""One connection's engine: ``session`` runs batches (each statement planned, run, its SQLite
errors turned into SQL Server's), ``session_functions`` the SQLite functions bound to a session
(``@@TRANCOUNT``, ``@@SPID``, the LSN of a savepoint, ...).
"""
