-- Settings of a drain's sessions, so that a dead or hung drain cannot hold queue rows:
-- - client_connection_check_interval (PostgreSQL 14+): a statement whose client died is cancelled
--   within seconds instead of running on, holding its rows' locks, until it tries to send results;
-- - statement_timeout: no receive or claim statement runs longer than this;
-- - idle_in_transaction_session_timeout: a client that stops (not dies) mid-batch loses its claim,
--   so the rows go back to the queue instead of staying locked;
-- - lock_timeout: a receive's wait for a table lock another program holds (a migration, VACUUM FULL)
--   ends after at most 30 s (as SQL Server's LOCK_TIMEOUT), failing the queue's drain with that reason,
--   and always before the statement_timeout (``queues.lock_timeout``: else the wait was told as a statement
--   timeout); the receive's row locks are skipped (SKIP LOCKED), never waited for;
-- - enable_seqscan off: the receive must walk the seq index whatever the statistics say.
-- Settings this server does not know (older versions) are skipped, not errors.
SELECT set_config(s.name, s.value, false)
FROM (VALUES ('client_connection_check_interval', :check_interval),
             ('statement_timeout', :statement_timeout),
             ('idle_in_transaction_session_timeout', :idle_timeout),
             ('lock_timeout', :lock_timeout),
             ('enable_seqscan', 'off')) AS s(name, value)
WHERE s.name IN (SELECT name FROM pg_settings);
