SELECT count(*) FROM {catalog_prefix}sys.objects WHERE object_id = OBJECT_ID(:qualified_name) AND type = 'U';
