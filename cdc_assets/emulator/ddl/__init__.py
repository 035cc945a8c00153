"""CREATE / ALTER / DROP of tables and indexes: ``ddl`` (the planner) over ``create_table`` and
``alter_table``; the catalog rows they write are :mod:`..catalog.catalog_rows`'s.
"""
