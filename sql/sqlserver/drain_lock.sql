-- One drain per queue at a time, across processes: a session-owned application lock, released
-- when the drain's lock connection closes. Returns 1 when acquired.
DECLARE @result int;
EXEC @result = sp_getapplock @Resource = :lock_name, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0;
SELECT CASE WHEN @result >= 0 THEN 1 ELSE 0 END AS acquired;
