-- The transport's own receive: one row per statement.
WITH message AS (
    SELECT TOP (1) *
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
