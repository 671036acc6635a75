-- Every unresolved claim, each app id's oldest first: what a drain's driver commits while Spark
-- tasks claim batches (one statement, so a claim seen at version N means N-1 was seen or cleared).
SELECT queue, app_id, version, lake_table, row_count, staged FROM {table} ORDER BY app_id, version;
