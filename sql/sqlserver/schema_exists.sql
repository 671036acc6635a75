-- Does the schema exist? (queuelake never creates schemas on SQL Server.)
SELECT count(*) FROM {catalog_prefix}sys.schemas WHERE name = :schema;
