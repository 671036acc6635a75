-- Destructive batched receive: the oldest :batch_size rows by RowVersion that no other receiver
-- holds. Expired is judged by the database clock (GETUTCDATE), never the client's. Expires is a
-- datetime (1753 to 9999-12-31 23:59:59.997), inside every client type's range: nothing is
-- clamped, so raw_expires is always null (PostgreSQL's statement says why the column exists).
-- Rows without a RowVersion (a table made by hand) are left where they are, as PostgreSQL's receive
-- leaves rows without a seq: SQL Server sorts NULL first, and such a row failed every batch it began
-- (count_null_seq.sql counts them for the summary).
WITH message AS (
    SELECT TOP (:batch_size) *
    FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE RowVersion IS NOT NULL
    ORDER BY RowVersion
)
DELETE FROM message
OUTPUT deleted.Id,
       deleted.RowVersion,
       CASE WHEN deleted.Expires IS NULL THEN 0 WHEN deleted.Expires > GETUTCDATE() THEN 0 ELSE 1 END,
       deleted.Expires,
       CAST(NULL AS nvarchar(64)) AS raw_expires,
       deleted.Headers,
       deleted.Body;
