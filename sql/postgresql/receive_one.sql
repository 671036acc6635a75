-- The transport's own receive: one row per statement (used to compete with the drain in tests).
DELETE FROM {queue}
USING (
    SELECT seq FROM {queue} ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED
) AS claimed
WHERE {queue}.seq = claimed.seq
RETURNING {queue}.id,
          {queue}.seq,
          ({queue}.expires IS NOT NULL AND {queue}.expires <= (now() AT TIME ZONE 'UTC')) AS expired,
          {queue}.expires,
          {queue}.headers,
          {queue}.body;
