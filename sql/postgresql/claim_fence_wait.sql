-- Whether no claim transaction is under way on a queue (claim_fence_shared.sql): a drain that just took
-- the queue's lock from a drain whose lock session died must see that drain's last claims before it
-- reads the queue's claims and versions. Tried, not waited for (the caller asks again, says why it
-- waits and gives up on a stop or its time box); taken and released in the statement's transaction.
SELECT pg_try_advisory_xact_lock(hashtextextended(:lock_name, 0)) AS granted;
