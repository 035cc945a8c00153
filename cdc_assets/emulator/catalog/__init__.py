"""The database file: its SQLite layout, the system tables and views, the catalog of tables.

``storage`` (the bookkeeping tables, names, object ids, the catalog token), ``sqlite_db`` (the
SQLite connections, pooled per file), ``system_objects`` (the system tables and views, typed)
with the views' SQL in ``system_views``, ``constraint_views`` and ``session_views``,
``bootstrap`` (the layout made in a new file, brought up to date in an older one), ``catalog``
(:class:`~.catalog.Catalog`: tables, their columns and capture instances, refreshed
incrementally), ``catalog_rows`` and ``constraint_rows`` (writing its rows).
"""
