-- Every row of the queue, locked by another session or not (MVCC sees rows whose deleting
-- transaction is still open): after an empty receive, these are rows other sessions hold.
SELECT count(*) FROM {queue};
