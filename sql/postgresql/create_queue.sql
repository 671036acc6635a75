-- Queue table of the NServiceBus PostgreSQL transport. Installers may race: the advisory lock,
-- held to the end of the transaction, serialises them, and IF NOT EXISTS makes reruns no-ops.
SELECT pg_advisory_xact_lock(hashtextextended(:lock_name, 0));
CREATE TABLE IF NOT EXISTS {queue} (
    id uuid NOT NULL PRIMARY KEY,
    expires timestamp,
    headers text NOT NULL,
    body bytea,
    seq serial NOT NULL UNIQUE
);
CREATE INDEX IF NOT EXISTS {expires_index} ON {queue} (expires) INCLUDE (id, seq) WHERE expires IS NOT NULL;
