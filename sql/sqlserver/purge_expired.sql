-- One batch of the transport's purge of expired rows (10,000 by default); callers loop.
DELETE FROM {queue}
WHERE RowVersion IN (
    SELECT TOP (:batch_size) RowVersion
    FROM {queue} WITH (UPDLOCK, READPAST, ROWLOCK)
    WHERE Expires < GETUTCDATE()
);
