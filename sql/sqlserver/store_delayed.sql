-- Store a delayed message; Due is the database UTC clock plus the delay.
INSERT INTO {queue} (Headers, Body, Due)
VALUES (:headers, :body, DATEADD(ms, :delay_ms, GETUTCDATE()));
