-- Estimated depth, as the transport peeks: the RowVersion span of rows nobody holds.
SELECT COALESCE(max(RowVersion) - min(RowVersion) + 1, 0) AS depth FROM {queue} WITH (READPAST);
