-- Destructive batched receive: the oldest :batch_size rows by RowVersion that no other receiver
-- holds. Expired is judged by the database clock (GETUTCDATE), never the client's.
WITH message AS (
    SELECT TOP (:batch_size) *
    FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
    ORDER BY RowVersion
)
DELETE FROM message
OUTPUT deleted.Id,
       deleted.RowVersion,
       CASE WHEN deleted.Expires IS NULL THEN 0 WHEN deleted.Expires > GETUTCDATE() THEN 0 ELSE 1 END,
       deleted.Expires,
       deleted.Headers,
       deleted.Body;
