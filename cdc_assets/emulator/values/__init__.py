"""SQL Server's types and values as the emulator stores them in SQLite.

``types`` (each SQL Server type: its SQLite storage form, encoder and decoder, the Python type
pyodbc returns), ``type_parsing`` (``nvarchar(50)`` and the like into a type), ``sqlite_values``
(values in their stored forms), ``untyped_values`` (parameters without a declared type), and the
SQLite functions over stored values every connection registers: ``udfs`` (LSNs, update masks,
names) and ``offset_functions`` (``DATEPART``, ``SWITCHOFFSET``, ``TODATETIMEOFFSET``).
"""
