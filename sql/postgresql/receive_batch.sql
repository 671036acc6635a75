-- Destructive batched receive: the oldest :batch_size rows by seq that no other receiver holds.
-- Expired is judged by the database clock (UTC), never the client's. RETURNING order is not seq
-- order: callers sort. id and seq are cast so every driver (ADBC included) returns text and int64.
DELETE FROM {queue} AS q
USING (
    SELECT seq
    FROM {queue}
    ORDER BY seq
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
) AS claimed
WHERE q.seq = claimed.seq
RETURNING CAST(q.id AS text) AS id,
          CAST(q.seq AS bigint) AS seq,
          (q.expires IS NOT NULL AND q.expires <= (now() AT TIME ZONE 'UTC')) AS expired,
          q.expires,
          q.headers,
          q.body;
