-- Does the named index exist? A re-install skips CREATE INDEX IF NOT EXISTS when it does: that
-- statement takes a SHARE lock on the table before it finds the index, so it would wait for every
-- open receive (and hold up every new one) although there is nothing to do.
SELECT count(*) FROM pg_catalog.pg_indexes WHERE schemaname = :schema AND indexname = :index_name;
