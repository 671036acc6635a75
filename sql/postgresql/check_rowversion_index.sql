-- Is there an index whose first column is seq? Without it every receive scans the table.
SELECT count(*)
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class t ON t.oid = i.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
WHERE n.nspname = :schema AND t.relname = :table AND a.attname = 'seq';
