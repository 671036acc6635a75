-- Store a delayed message; Due is the database clock plus the delay. The headers carry
-- NServiceBus.SqlServer.ForwardDestination, so the endpoint forwards it when due.
INSERT INTO {queue} (id, headers, body, due)
VALUES (
    CAST(:id AS uuid),
    CAST(:headers AS text),
    CAST(:body AS bytea),
    now() + CAST(:delay_ms AS bigint) * interval '1 millisecond'
);
