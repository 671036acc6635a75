-- The copies the table refused undone; the batch's transaction goes on (``queues.savepoint``).
ROLLBACK TRANSACTION queuelake_rows;
