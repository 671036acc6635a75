-- Send one message to a queue without the Recoverable column (newer transport versions).
INSERT INTO {queue} (Id, CorrelationId, ReplyToAddress, Expires, Headers, Body)
VALUES (
    :id,
    NULL,
    NULL,
    CASE WHEN :ttbr_ms IS NULL THEN NULL ELSE DATEADD(ms, :ttbr_ms, GETUTCDATE()) END,
    :headers,
    :body
);
