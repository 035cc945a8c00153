"""Change data capture: what is logged as a transaction writes, what the agent's jobs do with it.

``transaction_log`` (the triggers that log each change of a tracked table inside the writer's
transaction), ``capture`` (the capture job: log rows into ``cdc.<capture_instance>_CT`` and
``cdc.lsn_time_mapping``; the cleanup job; :class:`~.capture.CaptureAgent`), ``functions``
(the SQLite text of ``sys.fn_cdc_*`` and ``cdc.fn_cdc_get_all_changes_*`` /
``fn_cdc_get_net_changes_*``, error 313 outside the validity interval).
"""
