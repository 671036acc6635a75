-- Does the schema exist? install creates it only when missing.
SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = :schema;
