-- Settings of a drain's sessions. XACT_ABORT: any error rolls the whole batch back, so a failed
-- claim never leaves a half-done transaction holding rows. LOCK_TIMEOUT bounds a wait for a lock
-- (READPAST skips row locks, but not a table lock taken by someone else): at most 30 s, and shorter than
-- drain.statement_timeout_seconds as on PostgreSQL. SQL Server notices a dead client's connection itself
-- and rolls back its transaction; the client-side check and idle timeout have no equivalent and are
-- ignored. Not verified against a real SQL Server (parsed with sqlglot only).
SET XACT_ABORT ON;
SET LOCK_TIMEOUT :lock_timeout_ms;
