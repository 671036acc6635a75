-- queuelake where: the rows of an endpoint's delayed-delivery table (<endpoint>.Delayed) whose
-- headers (or body) hold a text, read without taking or locking any row (where_queue.sql says why a
-- plain SELECT is a peek). due is when the endpoint moves the row to the queue its
-- NServiceBus.SqlServer.ForwardDestination header names: NServiceBus writes it as the UTC wall clock read
-- in the session's zone (store_delayed.sql), so its wall clock here is UTC's, and it is due when the
-- endpoint's own test says so (Due < now() AT TIME ZONE 'UTC').
SET TRANSACTION READ ONLY;
SELECT set_config('statement_timeout', :statement_timeout, true),
       set_config('lock_timeout', :lock_timeout, true);
SELECT CAST(d.id AS text) AS id,
       CAST(NULL AS bigint) AS seq,
       CAST(CAST(d.due AS timestamp) AS text) AS due,
       (d.due IS NOT NULL AND d.due <= CAST(now() AT TIME ZONE 'UTC' AS timestamptz)) AS due_now,
       d.headers,
       CASE WHEN CAST(:body_text AS bytea) IS NULL THEN NULL ELSE d.body END AS body
FROM {queue} AS d
WHERE (CAST(:header_text AS text) IS NOT NULL AND strpos(d.headers, CAST(:header_text AS text)) > 0)
   OR (CAST(:body_text AS bytea) IS NOT NULL AND position(CAST(:body_text AS bytea) IN d.body) > 0)
ORDER BY d.due
LIMIT :limit;
