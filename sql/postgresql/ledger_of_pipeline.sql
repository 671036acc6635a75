-- Every ledger row of one pipeline, whatever its output table (a replay reads its plan and the
-- batches it has already sent, to resume without resending).
SELECT output_table, batch_key, rows_sent, copies_sent FROM {table} WHERE pipeline = :pipeline;
