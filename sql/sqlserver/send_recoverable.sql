-- Send one message to a queue that has the Recoverable column: senders write 1.
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body)
VALUES (
    :id,
    NULL,
    NULL,
    1,
    CASE WHEN :ttbr_ms IS NULL THEN NULL ELSE DATEADD(ms, :ttbr_ms, GETUTCDATE()) END,
    :headers,
    :body
);
