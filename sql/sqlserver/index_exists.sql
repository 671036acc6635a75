-- Does the named index exist on the table?
SELECT count(*) FROM {catalog_prefix}sys.indexes WHERE object_id = OBJECT_ID(:qualified_name) AND name = :index_name;
