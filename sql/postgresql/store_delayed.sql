-- Store a delayed message; Due as NServiceBus writes it: the database's UTC wall clock read as a
-- timestamptz in the session's zone (timestamptz(now() AT TIME ZONE 'UTC')), plus the delay. Its
-- endpoint moves a row when Due < now() AT TIME ZONE 'UTC', through the same zone: written as the true
-- instant, Due came due early west of UTC and late east of it, by the zone's offset (a review). The
-- headers carry NServiceBus.SqlServer.ForwardDestination, so the endpoint forwards it when due.
INSERT INTO {queue} (id, headers, body, due)
VALUES (
    CAST(:id AS uuid),
    CAST(:headers AS text),
    CAST(:body AS bytea),
    CAST(now() AT TIME ZONE 'UTC' AS timestamptz) + CAST(:delay_ms AS bigint) * interval '1 millisecond'
);
