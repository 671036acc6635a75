-- Record a drained batch's claim. Runs in the transaction of the batch's DELETE: the rows leave the
-- queue only together with this record of where their content is (the staged files).
INSERT INTO {table} (app_id, version, queue, lake_table, row_count, staged)
VALUES (:app_id, :version, :queue, :lake_table, :row_count, :staged);
