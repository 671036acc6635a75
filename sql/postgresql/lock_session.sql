-- Settings of a drain's lock sessions (the queue's drain lock, its claims resolved, its newest seq and
-- depth read): a wait for a table lock is bounded. A queue table another program held locked (a
-- migration, VACUUM FULL, a long ALTER) held the drain's read of its newest seq, and with it the whole
-- run, for as long as the lock was held (a review: no statement_timeout on these sessions). The drain
-- lock and the claim fence are tried, never waited for, so the bound does not touch them.
SELECT set_config('lock_timeout', :lock_timeout, false);
