-- Batches of one output already published by this pipeline (to resume a round after a crash).
SELECT batch_key FROM {table} WHERE pipeline = :pipeline AND output_table = :output_table;
