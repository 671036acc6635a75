-- Queue tables may live in a schema of their own; create it if missing. Two installers racing on
-- a bare CREATE SCHEMA IF NOT EXISTS can both miss it and one fails on the catalog's unique index:
-- the advisory lock, held to the end of the transaction, serialises them.
SELECT pg_advisory_xact_lock(hashtextextended(:schema_lock_name, 0));
CREATE SCHEMA IF NOT EXISTS {schema};
