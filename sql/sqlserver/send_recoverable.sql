-- Send one message to a queue that has the Recoverable column: senders write 1.
-- DATEADD takes an int: milliseconds overflow it past 24.8 days, so whole days are added first.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
VALUES (
    :id,
    NULL,
    NULL,
    1,
    CASE WHEN :ttbr_ms IS NULL THEN NULL ELSE DATEADD(ms, CAST(:ttbr_ms % 86400000 AS int), DATEADD(day, CAST(:ttbr_ms / 86400000 AS int), GETUTCDATE())) END,
    :headers,
    :body
);
