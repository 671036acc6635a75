-- The drain's depth estimate waits at most 5 s for a table lock: a table another program holds locked
-- held back the one statement estimating every queue. Not verified against a real SQL Server (parsed
-- with sqlglot only).
SET LOCK_TIMEOUT 5000;
