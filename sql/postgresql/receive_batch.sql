-- Destructive batched receive: the oldest :batch_size rows by seq that no other receiver holds.
-- Expired is judged by the database clock (UTC), never the client's. RETURNING order is not seq
-- order: callers sort. id and seq are cast so every driver (ADBC included) returns text and int64.
--
-- The locking subquery sits in ARRAY(...): an InitPlan, run exactly once per statement whatever the
-- planner believes about the table. As a join (USING, IN, or a CTE) it became the inner side of a
-- nested loop once the table had been emptied, analysed (reltuples = 0) and refilled, re-running
-- LIMIT ... FOR UPDATE SKIP LOCKED for every row: quadratic. Drain sessions also run with
-- enable_seqscan off (drain_session.sql), so both scans stay on the seq index.
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
          q.expires,
          q.headers,
          q.body;
