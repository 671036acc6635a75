-- Destructive batched receive: the oldest :batch_size rows by seq that no other receiver holds.
-- Expired is judged by the database clock (UTC), never the client's. RETURNING order is not seq
-- order: callers sort. id and seq are cast so every driver (ADBC included) returns text and int64.
--
-- The locking subquery sits in ARRAY(...): an InitPlan, run exactly once per statement whatever the
-- planner believes about the table. As a join (USING, IN, or a CTE) it became the inner side of a
-- nested loop once the table had been emptied, analysed (reltuples = 0) and refilled, re-running
-- LIMIT ... FOR UPDATE SKIP LOCKED for every row: quadratic. Drain sessions also run with
-- enable_seqscan off (drain_session.sql), so both scans stay on the seq index.
--
-- expires comes back inside the range every client type holds (0001-01-01 to the last microsecond
-- of 9999, Python's datetime and Spark's timestamp): PostgreSQL's timestamp also takes infinity,
-- -infinity, BC dates and years past 9999, which other programs write and which made every driver
-- fail the receive (or, through psqlodbc, arrive as something else). Such a value is clamped to the
-- nearer end and its original text returned in raw_expires (null for every value not clamped). The
-- expired flag is computed on the original value, as the transport's own `expires < now()` does.
DELETE FROM {queue} AS q
WHERE q.seq = ANY (ARRAY(
    SELECT seq
    FROM {queue}
    ORDER BY seq
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
))
RETURNING CAST(q.id AS text) AS id,
          CAST(q.seq AS bigint) AS seq,
          (q.expires IS NOT NULL AND q.expires <= (now() AT TIME ZONE 'UTC')) AS expired,
          CASE WHEN q.expires IS NULL THEN NULL
               WHEN q.expires < TIMESTAMP '0001-01-01 00:00:00' THEN TIMESTAMP '0001-01-01 00:00:00'
               WHEN q.expires > TIMESTAMP '9999-12-31 23:59:59.999999' THEN TIMESTAMP '9999-12-31 23:59:59.999999'
               ELSE q.expires END AS expires,
          CASE WHEN NOT isfinite(q.expires) THEN CAST(q.expires AS text)
               WHEN q.expires < TIMESTAMP '0001-01-01 00:00:00'
                 OR q.expires > TIMESTAMP '9999-12-31 23:59:59.999999'
               THEN to_char(q.expires, 'YYYY-MM-DD"T"HH24:MI:SS.US') ||
                    CASE WHEN q.expires < TIMESTAMP '0001-01-01 00:00:00' THEN ' BC' ELSE '' END
               END AS raw_expires,
          q.headers,
          q.body;
