-- A claim's transaction marks itself under way for its queue, to its end: a drain that takes the queue's
-- lock next waits for every such transaction (claim_fence_wait.sql) before it reads the queue's claims.
-- Not the drain lock's key (a session's exclusive lock there would block its own claims).
SELECT pg_advisory_xact_lock_shared(hashtextextended(:lock_name, 0));
