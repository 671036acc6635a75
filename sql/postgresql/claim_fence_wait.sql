-- Wait for every claim transaction under way on a queue (claim_fence_shared.sql) to end: a drain that
-- just took the queue's lock from a drain whose lock session died must see that drain's last claims
-- before it reads the queue's claims and versions. Taken and released in the statement's transaction.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
