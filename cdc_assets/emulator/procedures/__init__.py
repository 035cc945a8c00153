"""``EXEC`` and the system procedures the emulator has.

``procedures`` (the ``EXEC`` planner and the registry procedures add themselves to),
``cdc_procedures`` (``sp_cdc_enable_db``, ``sp_cdc_enable_table``, ...), ``cdc_job_procedures``
(the agent's jobs: ``sp_cdc_start_job``, ``sp_cdc_scan``, cleanup), ``cdc_help_procedures``
(``sp_cdc_help_*``, ``sp_cdc_get_*``), ``help_procedures`` (``sp_help``, ``sp_helpindex``,
``sp_server_info``), ``catalog_procedures`` (the ODBC catalog procedures: ``sp_tables``,
``sp_columns``, ``sp_pkeys``, ``sp_datatype_info``, ...).
"""
