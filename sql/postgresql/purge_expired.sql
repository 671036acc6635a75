-- One batch of the transport's purge of expired rows; callers loop until it deletes nothing.
DELETE FROM {queue}
WHERE seq IN (
    SELECT seq
    FROM {queue}
    WHERE expires IS NOT NULL AND expires < (now() AT TIME ZONE 'UTC')
    ORDER BY seq
    LIMIT :batch_size
    FOR UPDATE SKIP LOCKED
);
