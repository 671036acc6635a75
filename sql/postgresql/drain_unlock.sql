-- The drain lock of drain_lock.sql released, so that its session can serve the next queue of the
-- run (sessions are kept: opening one costs a backend). Returns true when this session held it.
SELECT pg_advisory_unlock(hashtextextended(:lock_name, 0));
