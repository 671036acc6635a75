-- Store a delayed message; Due is the database UTC clock plus the delay.
-- DATEADD takes an int: milliseconds overflow it past 24.8 days, so whole days are added first.
INSERT INTO {queue} (Headers, Body, Due)
VALUES (:headers, :body, DATEADD(ms, CAST(:delay_ms % 86400000 AS int), DATEADD(day, CAST(:delay_ms / 86400000 AS int), GETUTCDATE())));
