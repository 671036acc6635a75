-- queuelake where: the rows of one queue table whose headers (or body) hold a text, read without
-- taking or locking any row: READPAST skips the rows a receiver holds (so a row being received right
-- now does not show) and the read waits on no row lock; LOCK_TIMEOUT bounds a wait behind a table
-- lock (DDL). SQL Server has no server-side statement time limit: the scan is bounded by the
-- client's query timeout. Not verified against a real SQL Server (no SQL Server ran this).
SET LOCK_TIMEOUT :lock_timeout_ms;
SELECT TOP (:limit)
       LOWER(CAST(q.Id AS varchar(36))) AS id,
       q.RowVersion AS seq,
       CONVERT(varchar(30), q.Expires, 126) AS expires,
       CASE WHEN q.Expires IS NOT NULL AND q.Expires <= GETUTCDATE() THEN 1 ELSE 0 END AS expired,
       q.Headers AS headers,
       CASE WHEN :body_text IS NULL THEN NULL ELSE q.Body END AS body
FROM {queue} AS q WITH (READPAST)
WHERE (:header_text IS NOT NULL
       AND (CHARINDEX(:header_text, q.Headers) > 0 OR LOWER(CAST(q.Id AS varchar(36))) = :header_text))
   OR (:body_text IS NOT NULL AND CHARINDEX(CAST(:body_text AS varbinary(max)), q.Body) > 0)
ORDER BY q.RowVersion;
