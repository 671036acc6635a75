-- After a probe's rollback (``queues.probe``): the savepoint freed, so probes do not nest.
RELEASE SAVEPOINT queuelake_rows;
