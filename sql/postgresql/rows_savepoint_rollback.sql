-- A probe's copies undone, taken or refused; the batch's transaction goes on (``queues.probe``).
ROLLBACK TO SAVEPOINT queuelake_rows;
