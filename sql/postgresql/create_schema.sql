-- Queue tables may live in a schema of their own; create it if missing.
CREATE SCHEMA IF NOT EXISTS {schema};
