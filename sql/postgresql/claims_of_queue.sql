-- The unresolved claims of one queue, oldest first: what a drain resolves before it receives.
SELECT app_id, version, lake_table, row_count, staged FROM {table} WHERE queue = :queue ORDER BY app_id, version;
