-- Store a delayed message due at an instant (publish's deliver_at): Due as store_delayed.sql writes it,
-- the UTC wall clock read as a timestamptz in the session's zone, here of :due (the UTC wall clock as
-- text, to the microsecond) rather than of now() plus a delay in whole milliseconds, which came back
-- up to 1 ms early. The headers carry NServiceBus.SqlServer.ForwardDestination.
INSERT INTO {queue} (id, headers, body, due)
VALUES (
    CAST(:id AS uuid),
    CAST(:headers AS text),
    CAST(:body AS bytea),
    CAST(CAST(CAST(:due AS text) AS timestamp) AS timestamptz)
);
