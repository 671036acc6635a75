-- Wait for every claim transaction under way on a queue (claim_fence_shared.sql) to end, in a
-- transaction of its own (the lock session is in autocommit): taken, then released by the commit.
BEGIN TRANSACTION;
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = -1;
COMMIT TRANSACTION;
SELECT @result AS granted;
