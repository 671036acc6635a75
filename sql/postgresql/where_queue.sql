-- queuelake where: the rows of one queue table whose headers (or body) hold a text, read without
-- taking or locking any row. A plain SELECT under READ COMMITTED takes no row lock and waits on none:
-- a receiver's FOR UPDATE SKIP LOCKED, or its DELETE not yet committed, neither blocks it nor is
-- blocked by it (the row a receiver holds still shows: it is in the queue until the receiver
-- commits). The table lock it takes (ACCESS SHARE) conflicts only with DDL; lock_timeout bounds
-- a wait behind one, statement_timeout the scan (both local to this read-only transaction).
-- headers is searched as text (the header JSON holds the id); body as bytes (the business key's
-- value as it is written in the body); the caller checks each candidate row's headers or body.
SET TRANSACTION READ ONLY;
SELECT set_config('statement_timeout', :statement_timeout, true),
       set_config('lock_timeout', :lock_timeout, true);
SELECT CAST(q.id AS text) AS id,
       CAST(q.seq AS bigint) AS seq,
       CAST(q.expires AS text) AS expires,
       (q.expires IS NOT NULL AND q.expires <= (now() AT TIME ZONE 'UTC')) AS expired,
       q.headers,
       CASE WHEN CAST(:body_text AS bytea) IS NULL THEN NULL ELSE q.body END AS body
FROM {queue} AS q
WHERE (CAST(:header_text AS text) IS NOT NULL
       AND (strpos(q.headers, CAST(:header_text AS text)) > 0 OR CAST(q.id AS text) = CAST(:header_text AS text)))
   OR (CAST(:body_text AS bytea) IS NOT NULL AND position(CAST(:body_text AS bytea) IN q.body) > 0)
ORDER BY q.seq
LIMIT :limit;
