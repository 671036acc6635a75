-- Is there an index whose first key column is Expires?
SELECT count(*)
FROM {catalog_prefix}sys.indexes AS i
JOIN {catalog_prefix}sys.index_columns AS ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id
JOIN {catalog_prefix}sys.columns AS c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
WHERE i.object_id = OBJECT_ID(:qualified_name) AND ic.key_ordinal = 1 AND c.name = 'Expires';
