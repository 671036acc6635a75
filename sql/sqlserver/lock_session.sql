-- Settings of a drain's lock sessions (the queue's drain lock, its claims resolved, its newest seq and
-- depth read): a wait for a table lock is bounded, as on the drain's receive sessions (drain_session.sql).
-- A queue table another program held locked held the run for as long as the lock was held. The bound
-- (:lock_timeout_ms) is at most 30 s and always shorter than the statement timeout. Not verified
-- against a real SQL Server (parsed with sqlglot only).
SET LOCK_TIMEOUT :lock_timeout_ms;
