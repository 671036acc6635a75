SELECT count(*) FROM pg_catalog.pg_tables WHERE schemaname = :schema AND tablename = :table;
