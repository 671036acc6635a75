-- The columns of a table an INSERT must fill (lower-case names): NOT NULL, no default, not an identity,
-- computed or rowversion column. One the send does not write makes every copy to the table fail.
SELECT LOWER(c.name) FROM {catalog_prefix}sys.columns AS c
WHERE c.object_id = OBJECT_ID(:qualified_name)
  AND c.is_nullable = 0 AND c.is_identity = 0 AND c.is_computed = 0 AND c.default_object_id = 0
  AND TYPE_NAME(c.system_type_id) <> 'timestamp';
