-- Every row of the queue, locked by another session or not: after an empty receive, these are rows
-- other sessions hold. READUNCOMMITTED reads past nothing and waits for nothing.
SELECT COUNT_BIG(*) FROM {queue} WITH (READUNCOMMITTED);
