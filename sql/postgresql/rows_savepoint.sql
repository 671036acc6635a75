-- Before a table's copies are sent on their own inside a batch's transaction (``queues.savepoint``): a
-- table that refuses some of them is rolled back to here, and the copies are sent again in halves until
-- the refused ones are found, so one bad row does not take its table out of the run.
SAVEPOINT queuelake_rows;
