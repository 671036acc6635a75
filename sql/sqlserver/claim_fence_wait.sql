-- Whether no claim transaction is under way on a queue (claim_fence_shared.sql), in a transaction of its
-- own (the lock session is in autocommit): tried without waiting (the caller asks again), then released
-- by the commit.
BEGIN TRANSACTION;
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 0;
COMMIT TRANSACTION;
SELECT CASE WHEN @result >= 0 THEN 1 ELSE 0 END AS granted;
