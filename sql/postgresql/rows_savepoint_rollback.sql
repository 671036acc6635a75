-- The copies the table refused undone; the batch's transaction goes on (``queues.savepoint``).
ROLLBACK TO SAVEPOINT queuelake_rows;
