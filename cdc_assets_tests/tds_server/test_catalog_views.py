"""The ``sys.*`` views of keys, indexes, defaults and services, through each real client.

The tests of ``cdc_assets_tests/emulator/test_catalog_views.py`` run unchanged over TDS with
pyodbc + ODBC Driver 18, pyodbc + FreeTDS and python-tds (the ``client`` fixture), so the
column names each driver reads from the result metadata and the values it decodes are checked
against SQL Server's documentation. (The test of an older database file is local only: it edits
the file.)
"""

from cdc_assets_tests.emulator.test_catalog_views import (
    test_a_change_table_has_its_clustered_index,
    test_default_constraints_in_sql_servers_text,
    test_foreign_keys_are_checked_not_kept_and_the_empty_views,
    test_identity_columns_seed_increment_and_last_value,
    test_index_ddl_errors_as_sql_server,
    test_key_constraints_are_objects_of_their_table,
    test_primary_key_heap_and_nonclustered_indexes,
    test_server_services_show_the_agent_running_with_the_capture_job,
    test_views_have_sql_servers_columns_in_order,
)
from cdc_assets_tests.tds_server.test_emulator_semantics import driver_exceptions

__all__ = [
    "driver_exceptions",
    "test_a_change_table_has_its_clustered_index",
    "test_default_constraints_in_sql_servers_text",
    "test_foreign_keys_are_checked_not_kept_and_the_empty_views",
    "test_identity_columns_seed_increment_and_last_value",
    "test_index_ddl_errors_as_sql_server",
    "test_key_constraints_are_objects_of_their_table",
    "test_primary_key_heap_and_nonclustered_indexes",
    "test_server_services_show_the_agent_running_with_the_capture_job",
    "test_views_have_sql_servers_columns_in_order",
]
