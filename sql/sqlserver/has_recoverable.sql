-- Older queue tables have Recoverable bit NOT NULL; senders must fill it only where it exists.
SELECT count(*) FROM {catalog_prefix}sys.columns WHERE object_id = OBJECT_ID(:qualified_name) AND name = 'Recoverable';
