-- The copies taken: the savepoint freed, so a batch sent in many parts holds no pile of subtransactions.
RELEASE SAVEPOINT queuelake_rows;
