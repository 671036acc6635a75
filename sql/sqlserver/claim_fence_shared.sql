-- A claim's transaction marks itself under way for its queue, to its end: a drain that takes the queue's
-- lock next waits for every such transaction (claim_fence_wait.sql) before it reads the queue's claims.
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = :lock_name, @LockMode = 'Shared', @LockOwner = 'Transaction', @LockTimeout = -1;
SELECT @result AS granted;
