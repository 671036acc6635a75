-- The drain's depth estimate waits at most 5 s for a table lock: a table another program holds locked
-- held back the one statement estimating every queue. Its queue's estimate is then unknown, the others'
-- are read one by one, without a wait for a lock (0: the table waited for once is still locked). Not
-- verified against a real SQL Server (parsed with sqlglot only).
SET LOCK_TIMEOUT :lock_timeout_ms;
