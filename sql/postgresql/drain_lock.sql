-- One drain per queue at a time, across processes: a session-level advisory lock, released when
-- the drain's lock connection closes (or its process dies). Returns true when acquired.
SELECT pg_try_advisory_lock(hashtextextended(:lock_name, 0));
