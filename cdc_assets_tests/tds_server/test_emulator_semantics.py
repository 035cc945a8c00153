"""The emulator's own semantic tests, run unchanged through each real client over TDS.

The fixtures they use (``connect``, ``conn``, ``orders``, ``source``) come from this package's
conftest and open pyodbc + ODBC Driver 18, pyodbc + FreeTDS or python-tds connections to the
emulator served over TDS, so every assertion is checked against what a real driver returns.
The tests expect the emulator's exception classes; here they are the driver's (pyodbc maps the
SQLSTATE the driver derives from the error number; python-tds has its own mapping, so any of its
errors is accepted and the number is checked in the text).

test_contract's ``test_query_functions`` and ``test_range_queries`` are not here: they also check
``cursor.description`` type codes, which are the driver's own (pyodbc says ``bytearray`` for
binary columns, python-tds gives TDS type numbers); test_clients.py checks their values.
"""

import pytest

from cdc_assets import emulator
from cdc_assets_tests.emulator.test_capture import (
    test_key_update_is_delete_then_insert,
    test_net_changes,
    test_order_inside_a_transaction,
    test_time_to_lsn_operators_and_help_procedures,
    test_two_capture_instances_after_schema_change,
    test_update_masks,
)
from cdc_assets_tests.emulator.test_contract import (
    test_admin_statements,
    test_catalog_queries,
    test_lsn_functions,
    test_snapshot_statements,
)
from cdc_assets_tests.emulator.test_server_functions import (
    test_an_offset_out_of_range_is_error_9810,
    test_collate_compares_as_the_collation_named,
    test_database_ids_and_names_as_sql_server_numbers_them,
    test_date_parts_and_offsets_as_sql_server_computes_them,
    test_information_schema_as_clients_read_it,
    test_object_names_as_other_cdc_consumers_ask_for_them,
    test_the_login_and_the_database_user,
    test_version_and_server_properties_as_sql_server_2022_gives_them,
)
from cdc_assets_tests.emulator.test_transactions import (
    test_if_runs_one_statement_as_jdbc_commits,
    test_nested_and_implicit_transactions,
    test_read_committed_reads_see_new_commits,
    test_rolled_back_work_never_appears,
    test_set_implicit_transactions_holds_work_until_commit,
)

_CLASSES = (
    "Error",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "InterfaceError",
)


@pytest.fixture(autouse=True)
def driver_exceptions(client: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if client == "pytds":
        import pytds

        for name in _CLASSES:
            monkeypatch.setattr(emulator, name, pytds.Error)
        return
    import pyodbc

    for name in _CLASSES:
        monkeypatch.setattr(emulator, name, getattr(pyodbc, name))


__all__ = [
    "test_admin_statements",
    "test_an_offset_out_of_range_is_error_9810",
    "test_catalog_queries",
    "test_collate_compares_as_the_collation_named",
    "test_database_ids_and_names_as_sql_server_numbers_them",
    "test_date_parts_and_offsets_as_sql_server_computes_them",
    "test_if_runs_one_statement_as_jdbc_commits",
    "test_information_schema_as_clients_read_it",
    "test_key_update_is_delete_then_insert",
    "test_lsn_functions",
    "test_nested_and_implicit_transactions",
    "test_net_changes",
    "test_object_names_as_other_cdc_consumers_ask_for_them",
    "test_order_inside_a_transaction",
    "test_read_committed_reads_see_new_commits",
    "test_rolled_back_work_never_appears",
    "test_set_implicit_transactions_holds_work_until_commit",
    "test_snapshot_statements",
    "test_the_login_and_the_database_user",
    "test_time_to_lsn_operators_and_help_procedures",
    "test_two_capture_instances_after_schema_change",
    "test_update_masks",
    "test_version_and_server_properties_as_sql_server_2022_gives_them",
]
