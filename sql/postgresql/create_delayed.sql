-- Delayed-delivery store of an endpoint (<endpoint>.Delayed); the endpoint moves due rows itself.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
CREATE TABLE IF NOT EXISTS {queue} (
    id uuid DEFAULT gen_random_uuid() PRIMARY KEY,
    headers text,
    body bytea,
    due timestamptz
);
CREATE INDEX IF NOT EXISTS {due_index} ON {queue} (due);
