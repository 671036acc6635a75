-- Send one message. Expires comes from the TTBR by the database clock; NULL TTBR, no expiry.
INSERT INTO {queue} (id, expires, headers, body)
VALUES (
    CAST(:id AS uuid),
    CASE WHEN CAST(:ttbr_ms AS bigint) IS NULL THEN NULL
         ELSE (now() AT TIME ZONE 'UTC') + CAST(:ttbr_ms AS bigint) * interval '1 millisecond' END,
    CAST(:headers AS text),
    CAST(:body AS bytea)
);
