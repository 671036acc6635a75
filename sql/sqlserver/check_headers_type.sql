-- The Headers column's type: nvarchar(max) is expected; varchar loses non-Latin characters.
SELECT TYPE_NAME(c.system_type_id) + CASE WHEN c.max_length = -1 THEN '(max)' ELSE '' END
FROM {catalog_prefix}sys.columns AS c
WHERE c.object_id = OBJECT_ID(:qualified_name) AND c.name = 'Headers';
