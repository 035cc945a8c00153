"""A session's transactions: their state, isolation levels, savepoints and LSNs.

``transaction`` (the state of the open T-SQL transaction), ``session_transactions``
(``BEGIN`` / ``COMMIT`` / ``ROLLBACK`` / ``SAVE TRAN``, the write lock taken at the first write,
sequence numbers and the commit LSN stamped on the transaction's change-log rows).
"""
