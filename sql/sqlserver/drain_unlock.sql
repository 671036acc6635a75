-- The drain lock of drain_lock.sql released, so that its session can serve the next queue of the
-- run (sessions are kept: opening one costs a login). Returns 1 when this session held it.
DECLARE @result int;
EXEC @result = sp_releaseapplock @Resource = :lock_name, @LockOwner = 'Session';
SELECT CASE WHEN @result >= 0 THEN 1 ELSE 0 END AS released;
