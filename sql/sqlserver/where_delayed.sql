-- queuelake where: the rows of an endpoint's delayed-delivery table whose headers (or body) hold a
-- text, read without taking or locking any row (READPAST; where_queue.sql says more). The table has
-- no id: the row is named by its RowVersion. Not verified against a real SQL Server.
SET LOCK_TIMEOUT :lock_timeout_ms;
SELECT TOP (:limit)
       CAST(NULL AS varchar(36)) AS id,
       d.RowVersion AS seq,
       CONVERT(varchar(30), d.Due, 126) AS due,
       CASE WHEN d.Due <= GETUTCDATE() THEN 1 ELSE 0 END AS due_now,
       d.Headers AS headers,
       CASE WHEN :body_text IS NULL THEN NULL ELSE d.Body END AS body
FROM {queue} AS d WITH (READPAST)
WHERE (:header_text IS NOT NULL AND CHARINDEX(:header_text, d.Headers) > 0)
   OR (:body_text IS NOT NULL AND CHARINDEX(CAST(:body_text AS varbinary(max)), d.Body) > 0)
ORDER BY d.Due;
