-- Before a table's copies are sent on their own inside a batch's transaction (``queues.savepoint``).
SAVE TRANSACTION queuelake_rows;
