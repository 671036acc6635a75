-- The drain's depth estimate waits at most 5 s for a table lock: a table another program holds locked
-- (a migration, VACUUM FULL, a long ALTER) failed to answer, and the one statement estimating every
-- queue waited with it, silent and past --max-seconds. Its queue's estimate is then unknown, the others'
-- are read one by one, without a wait for a lock (1 ms: the table waited for once is still locked).
-- Committed by the caller: a rolled-back set_config would be undone.
SELECT set_config('lock_timeout', :lock_timeout, false);
